#include <gtest/gtest.h>
#include <pthread.h>

#include <csignal>

#include <percpu/histogram.h>
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <stdexcept>
#include <thread>
#include <vector>

#include "child.h"
#include "modes.h"

namespace {

using percpu::histogram_layout;
using percpu::histogram_snapshot;

TEST(HistogramLayout, SmallValuesAreExactAndLargerOnesWithinThePrecision) {
  const histogram_layout l(4, 1'000'000);  // 16 sub-buckets: under 1/16 relative width
  for (std::uint64_t v = 0; v < 32; ++v) {
    EXPECT_EQ(l.index_of(v), v);
    EXPECT_EQ(l.lowest(v), v);
    EXPECT_EQ(l.highest(v), v);
  }
  std::mt19937_64 rng(7);
  for (int k = 0; k < 100000; ++k) {
    const std::uint64_t v = rng() % 1'000'001;
    const std::size_t i = l.index_of(v);
    ASSERT_LT(i, l.bucket_count());
    ASSERT_LE(l.lowest(i), v);
    ASSERT_GE(l.highest(i), v);
    ASSERT_LE(l.highest(i) - l.lowest(i), v / 16) << v;
  }
  EXPECT_EQ(l.index_of(1'000'000), l.bucket_count() - 1);
  EXPECT_EQ(l.highest(l.bucket_count() - 1), 1'000'000u);
  EXPECT_EQ(l.index_of(UINT64_MAX), l.bucket_count() - 1);  // above the range: the last bucket
}

TEST(HistogramLayout, BucketsTileTheRangeWithoutGapsOrOverlap) {
  for (int p : {0, 1, 3, 7}) {
    const histogram_layout l(p, 5'000'000);
    EXPECT_EQ(l.lowest(0), 0u);
    for (std::size_t i = 1; i < l.bucket_count(); ++i) {
      ASSERT_EQ(l.lowest(i), l.highest(i - 1) + 1) << "p " << p << " bucket " << i;
      ASSERT_EQ(l.index_of(l.lowest(i)), i);
      ASSERT_EQ(l.index_of(l.highest(i)), i);
    }
  }
  const histogram_layout full(7, UINT64_MAX);
  EXPECT_EQ(full.index_of(UINT64_MAX), full.bucket_count() - 1);
  EXPECT_EQ(full.bucket_count(), (64u - 7 + 1) * 128);
  EXPECT_EQ(full.highest(full.bucket_count() - 1), UINT64_MAX);
  EXPECT_EQ(histogram_layout().bucket_count(), histogram_layout().index_of(3'600'000'000'000) + 1);
}

TEST(HistogramLayout, BadArgumentsAreRefused) {
  EXPECT_THROW(histogram_layout(-1, 100), std::invalid_argument);
  EXPECT_THROW(histogram_layout(15, 100), std::invalid_argument);
  EXPECT_THROW(histogram_layout(7, 0), std::invalid_argument);
  EXPECT_THROW(histogram_layout(14, UINT64_MAX), std::invalid_argument);  // over 2^18 buckets
  EXPECT_NO_THROW(histogram_layout(14, 1'000'000));
}

TEST(HistogramSnapshot, QuantilesFollowHdrHistogramsRanks) {
  histogram_snapshot s(histogram_layout(7, 1'000'000));
  EXPECT_EQ(s.value_at_quantile(0.5), 0u);  // empty
  for (std::uint64_t v = 1; v <= 100; ++v) s.add_bucket(s.layout().index_of(v), 1);
  EXPECT_EQ(s.count(), 100u);
  EXPECT_EQ(s.value_at_quantile(0.0), 1u);
  EXPECT_EQ(s.value_at_quantile(0.5), 50u);
  EXPECT_EQ(s.value_at_quantile(0.99), 99u);
  EXPECT_EQ(s.value_at_quantile(1.0), 100u);
  EXPECT_EQ(s.min(), 1u);
  EXPECT_EQ(s.max(), 100u);
  EXPECT_EQ(s.count_at_or_below(10), 10u);
  EXPECT_THROW((void)s.value_at_quantile(1.5), std::invalid_argument);
  EXPECT_THROW((void)s.value_at_quantile(std::nan("")), std::invalid_argument);
  // Large values: the quantile is within the precision of the true one.
  histogram_snapshot big(histogram_layout(7, 1u << 30));
  for (std::uint64_t v = 1; v <= 1000; ++v) big.add_bucket(big.layout().index_of(v * 1000), 1);
  const std::uint64_t p90 = big.value_at_quantile(0.9);
  EXPECT_GE(p90, 900'000u);
  EXPECT_LE(p90, 900'000u + 900'000u / 128);
}

// Ranks as HdrHistogram's Java getValueAtPercentile takes them: a q whose double lies a hair
// above its decimal does not move to the next rank.
TEST(HistogramSnapshot, QuantileRanksDoNotRoundUpOnTheDoubleOfQ) {
  histogram_snapshot ten(histogram_layout(7, 1000)), hundred(histogram_layout(7, 1000));
  for (std::uint64_t v = 1; v <= 10; ++v) ten.add_bucket(v, 1);
  for (std::uint64_t v = 1; v <= 100; ++v) hundred.add_bucket(v, 1);
  EXPECT_EQ(ten.value_at_quantile(0.9), 9u);
  EXPECT_EQ(ten.value_at_quantile(0.7), 7u);
  EXPECT_EQ(hundred.value_at_quantile(0.01), 1u);
  EXPECT_EQ(hundred.value_at_quantile(0.07), 7u);
  EXPECT_EQ(hundred.value_at_quantile(0.0), 1u);
}

TEST(HistogramSnapshot, ValuesAboveTheRangeCountAboveItsTop) {
  percpu::histogram<> h(histogram_layout(7, 1000));
  h.record(100);
  h.record(5000);  // above: in the last bucket, but not at or below 1000
  const histogram_snapshot s = h.snapshot();
  EXPECT_EQ(s.count_at_or_below(1000), 1u);
  EXPECT_EQ(s.count_at_or_below(UINT64_MAX), 2u);
  EXPECT_EQ(s.above_range(), 1u);
}

// count() never wraps: a merge or an add that would take it past 2^64 - 1 records is refused,
// changing nothing, so the buckets still sum to it and the quantiles stay right.
TEST(HistogramSnapshot, ACountPast64BitsIsRefusedAndChangesNothing) {
  const histogram_layout layout(3, 1000);
  histogram_snapshot a(layout), b(layout);
  a.add_bucket(1, UINT64_MAX - 1);
  a.add_sum(7);
  b.add_bucket(2, 2);
  b.add_sum(5);
  const std::vector<std::uint64_t> before = a.buckets();
  EXPECT_THROW(a.merge(b), std::overflow_error);
  EXPECT_THROW(a.add_bucket(0, 2), std::overflow_error);
  EXPECT_EQ(a.count(), UINT64_MAX - 1);
  EXPECT_EQ(a.buckets(), before);
  EXPECT_EQ(a.sum(), 7u);
  EXPECT_EQ(a.value_at_quantile(1.0), layout.highest(1));
  a.add_bucket(2, 1);  // exactly 2^64 - 1: allowed
  EXPECT_EQ(a.count(), UINT64_MAX);
  EXPECT_EQ(a.max(), layout.highest(2));
  histogram_snapshot empty(layout);
  a.merge(empty);
  EXPECT_EQ(a.count(), UINT64_MAX);
}

TEST(HistogramSnapshot, MergeAddsAndRefusesAnotherLayout) {
  histogram_snapshot a(histogram_layout(5, 10'000)), b(histogram_layout(5, 10'000));
  a.add_bucket(3, 2);
  a.add_sum(6);
  b.add_bucket(3, 1);
  b.add_bucket(40, 4);
  b.add_sum(3 + 4 * b.layout().lowest(40));
  b.add_above_range(1);
  a.merge(b);
  EXPECT_EQ(a.count(), 7u);
  EXPECT_EQ(a[3], 3u);
  EXPECT_EQ(a[40], 4u);
  EXPECT_EQ(a.sum(), 9 + 4 * b.layout().lowest(40));
  EXPECT_EQ(a.above_range(), 1u);
  histogram_snapshot other(histogram_layout(6, 10'000));
  EXPECT_THROW(a.merge(other), std::invalid_argument);
  EXPECT_EQ(a.count(), 7u);  // unchanged
  EXPECT_THROW(a.add_bucket(a.layout().bucket_count(), 1), std::out_of_range);
  EXPECT_EQ(a.count(), 7u);
  a.reset();
  EXPECT_EQ(a.count(), 0u);
  EXPECT_EQ(a.sum(), 0u);
}

template <class T>
class Histogram : public ::testing::Test {};
TYPED_TEST_SUITE(Histogram, percpu::test::Modes);

TYPED_TEST(Histogram, RecordsCountSumAndBuckets) {
  percpu::histogram<TypeParam::value> h(histogram_layout(7, 1'000'000));
  std::uint64_t sum = 0;
  for (std::uint64_t v = 0; v < 5000; ++v) {
    h.record(v * 17);
    sum += v * 17;
  }
  h.record(5'000'000);  // above the range
  const histogram_snapshot s = h.snapshot();
  EXPECT_EQ(s.count(), 5001u);
  EXPECT_EQ(s.sum(), sum + 5'000'000);
  EXPECT_EQ(s.above_range(), 1u);
  EXPECT_EQ(s[s.layout().bucket_count() - 1], 1u);  // the clamped one (the others are far below)
  std::uint64_t total = 0;
  for (std::uint64_t c : s.buckets()) total += c;
  EXPECT_EQ(total, s.count());
  EXPECT_EQ(s[0], 1u);
  EXPECT_EQ(s[17], 1u);
  // Snapshots accumulate until a reset.
  h.record(3);
  EXPECT_EQ(h.snapshot().count(), 5002u);
}

TYPED_TEST(Histogram, ResetReturnsWhatItTookAndKeepsLaterRecords) {
  percpu::histogram<TypeParam::value> h(histogram_layout(3, 1000));
  for (int i = 0; i < 10; ++i) h.record(5);
  const histogram_snapshot taken = h.snapshot_and_reset();
  EXPECT_EQ(taken.count(), 10u);
  EXPECT_EQ(taken.sum(), 50u);
  EXPECT_EQ(h.snapshot().count(), 0u);
  h.record(7);
  h.reset();
  h.record(9);
  const histogram_snapshot s = h.snapshot();
  EXPECT_EQ(s.count(), 1u);
  EXPECT_EQ(s.sum(), 9u);
  histogram_snapshot into;  // another layout: snapshot_or_error gives it this one's
  ASSERT_FALSE(h.snapshot_or_error(into));
  EXPECT_EQ(into.layout(), h.layout());
  EXPECT_EQ(into.count(), 1u);
}

// Snapshots while threads record: each is consistent (the sum is exactly the sum of the values
// its buckets hold: the values are below 2^(p+1), each in a bucket of its own), counts only grow,
// and with the resets' snapshots the last one holds every record.
TYPED_TEST(Histogram, SnapshotsUnderConcurrentRecordingAreConsistentAndLoseNothing) {
  const histogram_layout layout(6, 127);  // 0..127 exact
  percpu::histogram<TypeParam::value> h(layout);
  constexpr int kThreads = 4;
  std::atomic<bool> stop{false};
  std::vector<std::uint64_t> records(kThreads), sums(kThreads);
  std::vector<std::thread> workers;
  for (int t = 0; t < kThreads; ++t) {
    workers.emplace_back([&, t] {
      std::uint64_t n = 0, s = 0;
      for (std::uint64_t v = t; !stop.load(std::memory_order_relaxed); v = (v * 5 + 3) % 128) {
        h.record(v);
        ++n;
        s += v;
      }
      records[t] = n;
      sums[t] = s;
    });
  }
  histogram_snapshot taken(layout);
  std::uint64_t last = 0;
  for (int i = 0; i < 300; ++i) {
    const histogram_snapshot s = (i % 10 == 9) ? h.snapshot_and_reset() : h.snapshot();
    std::uint64_t weighted = 0, total = 0;
    for (std::size_t b = 0; b < s.buckets().size(); ++b) {
      weighted += b * s[b];
      total += s[b];
    }
    ASSERT_EQ(total, s.count()) << i;
    ASSERT_EQ(weighted, s.sum()) << i;
    if (i % 10 == 9) {
      taken.merge(s);
      last = 0;
    } else {
      ASSERT_GE(s.count(), last) << i;
      last = s.count();
    }
  }
  stop = true;
  for (auto& w : workers) w.join();
  taken.merge(h.snapshot());
  std::uint64_t n = 0, s = 0;
  for (int t = 0; t < kThreads; ++t) {
    n += records[t];
    s += sums[t];
  }
  EXPECT_EQ(taken.count(), n);
  EXPECT_EQ(taken.sum(), s);
}

// Concurrent snapshots (one at a time inside) with recorders: each still consistent.
TYPED_TEST(Histogram, ConcurrentSnapshotsAreEachConsistent) {
  percpu::histogram<TypeParam::value> h(histogram_layout(6, 127));
  std::atomic<bool> stop{false};
  std::thread recorder([&] {
    for (std::uint64_t v = 0; !stop.load(std::memory_order_relaxed); v = (v + 1) % 128) h.record(v);
  });
  std::atomic<int> bad{0};
  std::vector<std::thread> readers;
  for (int r = 0; r < 2; ++r)
    readers.emplace_back([&] {
      for (int i = 0; i < 200; ++i) {
        const histogram_snapshot s = h.snapshot();
        std::uint64_t weighted = 0;
        for (std::size_t b = 0; b < s.buckets().size(); ++b) weighted += b * s[b];
        if (weighted != s.sum()) bad.fetch_add(1);
      }
    });
  for (auto& r : readers) r.join();
  stop = true;
  recorder.join();
  EXPECT_EQ(bad.load(), 0);
}

// fork() while threads record and snapshot: the child's histogram is consistent (no record
// copied half done) and usable (its snapshot does not wait for the parent's threads).
TYPED_TEST(Histogram, ForkWhileOthersRecordLeavesTheChildsHistogramConsistent) {
#if PERCPU_TSAN
  GTEST_SKIP() << "ThreadSanitizer's runtime is not usable in a child forked from threads";
#endif
  percpu::histogram<TypeParam::value> h(histogram_layout(6, 127));
  std::atomic<bool> stop{false};
  std::vector<std::thread> workers;
  for (int t = 0; t < 2; ++t)
    workers.emplace_back([&, t] {
      for (std::uint64_t v = t; !stop.load(std::memory_order_relaxed); v = (v + 7) % 128)
        h.record(v);
    });
  std::thread snapshots([&] {
    while (!stop.load(std::memory_order_relaxed)) (void)h.snapshot();
  });
  for (int i = 0; i < 30; ++i) {
    const int status = percpu::test::in_child(
        [&] {
          histogram_snapshot s = h.snapshot();
          std::uint64_t weighted = 0;
          for (std::size_t b = 0; b < s.buckets().size(); ++b) weighted += b * s[b];
          if (weighted != s.sum()) return 1;
          h.record(100);
          const histogram_snapshot t = h.snapshot();
          return t.count() == s.count() + 1 && t.sum() == s.sum() + 100 ? 0 : 2;
        },
        10);
    ASSERT_EQ(status, 0) << "fork " << i;
  }
  stop = true;
  for (auto& w : workers) w.join();
  snapshots.join();
}

// After a fork() both processes see every record made before it, at their next snapshot, and a
// second fork copies them too (the fork's flip leaves no record in the closed bank).
TYPED_TEST(Histogram, RecordsBeforeAForkAreInTheNextSnapshotOfParentAndChildren) {
#if PERCPU_TSAN
  GTEST_SKIP() << "ThreadSanitizer's runtime is not usable in a child forked from threads";
#endif
  percpu::histogram<TypeParam::value> h(histogram_layout(6, 127));
  for (int i = 0; i < 1000; ++i) h.record(5);
  auto child = [&](std::uint64_t count, std::uint64_t sum) {
    return percpu::test::in_child([&] {
      const histogram_snapshot s = h.snapshot();
      return s.count() == count && s.sum() == sum ? 0 : 1;
    });
  };
  ASSERT_EQ(child(1000, 5000), 0);
  histogram_snapshot s = h.snapshot();
  EXPECT_EQ(s.count(), 1000u);
  for (int i = 0; i < 10; ++i) h.record(7);
  ASSERT_EQ(child(1010, 5070), 0);
  ASSERT_EQ(child(1010, 5070), 0);
  s = h.snapshot_and_reset();
  EXPECT_EQ(s.count(), 1010u);
  EXPECT_EQ(s.sum(), 5070u);
  EXPECT_EQ(h.snapshot().count(), 0u);
}

// Records from a signal handler that interrupts records on the same thread.
TYPED_TEST(Histogram, RecordsFromASignalHandlerAreCounted) {
  static percpu::histogram<TypeParam::value>* g;
  percpu::histogram<TypeParam::value> h(histogram_layout(6, 127));
  g = &h;
  static std::atomic<std::uint64_t> handled;
  handled = 0;
  struct sigaction sa {};
  sa.sa_handler = [](int) {
    g->record(1);
    handled.fetch_add(1, std::memory_order_relaxed);
  };
  struct sigaction old {};
  ASSERT_EQ(sigaction(SIGUSR1, &sa, &old), 0);
  const pthread_t self = pthread_self();
  std::atomic<bool> stop{false};
  std::thread sender([&] {
    for (int i = 0; i < 2000; ++i) pthread_kill(self, SIGUSR1);
    stop = true;
  });
  std::uint64_t mine = 0;
  while (!stop.load(std::memory_order_relaxed)) {
    h.record(2);
    ++mine;
  }
  sender.join();
  sigaction(SIGUSR1, &old, nullptr);
  const histogram_snapshot s = h.snapshot();
  EXPECT_EQ(s[1], handled.load());
  EXPECT_EQ(s[2], mine);
  EXPECT_EQ(s.sum(), handled.load() + 2 * mine);
}

}  // namespace
