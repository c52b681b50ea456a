#include <gtest/gtest.h>

#include <percpu/percpu_counter.h>
#include <percpu/pool.h>
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <thread>
#include <vector>

#include "child.h"
#include "modes.h"

namespace {

template <class T>
class PercpuCounter : public ::testing::Test {};
TYPED_TEST_SUITE(PercpuCounter, percpu::test::Modes);

TYPED_TEST(PercpuCounter, AddsSumExactlyAndReadStaysWithinTheBound) {
  percpu::percpu_counter<TypeParam::value> c(8);
  EXPECT_EQ(c.batch(), 8);
  EXPECT_EQ(c.error_bound(), 7 * (c.slots() + 2));
  std::int64_t expect = 0;
  for (int i = 0; i < 1000; ++i) {
    const std::int64_t n = (i % 7) - 2;  // -2..4: slots fill, fold, and go negative
    c.add(n);
    expect += n;
    ASSERT_EQ(c.sum(), expect) << i;
    ASSERT_LE(std::abs(c.read() - expect), c.error_bound()) << i;
  }
  c.sub(expect);
  EXPECT_EQ(c.sum(), 0);
}

TYPED_TEST(PercpuCounter, ReadIsOneLoadOfTheSharedCountThatFoldsCatchUpWith) {
  percpu::percpu_counter<TypeParam::value> c(16);
  for (int i = 0; i < 15; ++i) c.add(1);
  // Unless the thread moved, all 15 sit in one slot (a move folds nothing either).
  EXPECT_LE(c.read(), 15);
  c.add(100);  // at least the batch: straight to the shared count
  EXPECT_GE(c.read(), 100);
  EXPECT_EQ(c.sum(), 115);
}

TYPED_TEST(PercpuCounter, BatchIsCheckedAndDefaultsToTwiceTheKernels) {
  using counter = percpu::percpu_counter<TypeParam::value>;
  EXPECT_THROW(counter(-1), std::invalid_argument);
  EXPECT_THROW(counter((std::int64_t{1} << 40) + 1), std::invalid_argument);
  counter d;
  EXPECT_EQ(d.batch(), std::max<std::int64_t>(64, 2 * std::int64_t{d.slots()}));
  counter one(1);  // every add goes to the shared count
  one.add(3);
  one.sub(1);
  EXPECT_EQ(one.read(), 2);
  EXPECT_EQ(one.error_bound(), 0);
}

TYPED_TEST(PercpuCounter, ExtremeValuesWrapAsInt64) {
  percpu::percpu_counter<TypeParam::value> c(4);
  c.add(INT64_MAX);
  c.add(1);
  EXPECT_EQ(c.sum(), INT64_MIN);
  c.sub(INT64_MIN);
  EXPECT_EQ(c.sum(), 0);
}

TYPED_TEST(PercpuCounter, CompareIsExactNearTheValueAndCheapFarFromIt) {
  percpu::percpu_counter<TypeParam::value> c(64);
  for (int i = 0; i < 1000; ++i) c.add(1);
  EXPECT_EQ(c.compare(1000), 0);
  EXPECT_EQ(c.compare(999), 1);
  EXPECT_EQ(c.compare(1001), -1);
  EXPECT_EQ(c.compare(INT64_MIN), 1);
  EXPECT_EQ(c.compare(INT64_MAX), -1);
}

// Every add that completed before a sum() is in it, and read() never strays past the bound:
// checked at every sample a checker takes while four threads add.
TYPED_TEST(PercpuCounter, ConcurrentAddsAreAllCountedAndReadStaysWithinTheBound) {
  percpu::percpu_counter<TypeParam::value> c(8);
  constexpr int kThreads = 4;
  struct alignas(64) progress {
    std::atomic<std::int64_t> started{0}, done{0};
  };
  std::vector<progress> p(kThreads);
  std::atomic<bool> stop{false};
  std::vector<std::thread> workers;
  for (int t = 0; t < kThreads; ++t) {
    workers.emplace_back([&, t] {
      std::minstd_rand rng(t + 1);
      for (int i = 0; i < 200000; ++i) {
        const std::int64_t n = static_cast<std::int64_t>(rng() % 12);  // some past the batch
        p[t].started.fetch_add(n, std::memory_order_seq_cst);
        c.add(n);
        p[t].done.fetch_add(n, std::memory_order_seq_cst);
      }
    });
  }
  std::thread checker([&] {
    while (!stop.load()) {
      std::int64_t done = 0, started = 0;
      for (auto& q : p) done += q.done.load(std::memory_order_seq_cst);
      const std::int64_t s = c.sum(), r = c.read();
      for (auto& q : p) started += q.started.load(std::memory_order_seq_cst);
      ASSERT_GE(s, done);
      ASSERT_LE(s, started);
      ASSERT_GE(r, done - c.error_bound());
      ASSERT_LE(r, started + c.error_bound());
    }
  });
  for (auto& w : workers) w.join();
  stop = true;
  checker.join();
  std::int64_t total = 0;
  for (auto& q : p) total += q.done.load();
  EXPECT_EQ(c.sum(), total);
  EXPECT_LE(std::abs(c.read() - total), c.error_bound());
}

TYPED_TEST(PercpuCounter, LimitedAddStopsExactlyAtTheLimit) {
  percpu::percpu_counter<TypeParam::value> c(16);
  int taken = 0;
  while (c.limited_add(3, 100)) ++taken;
  EXPECT_EQ(taken, 33);  // 99: one more 3 would pass 100
  EXPECT_EQ(c.sum(), 99);
  EXPECT_TRUE(c.limited_add(1, 100));
  EXPECT_FALSE(c.limited_add(1, 100));
  EXPECT_EQ(c.sum(), 100);
  // What sub() gives back is room again, whichever slot it sits in.
  c.sub(10);
  EXPECT_TRUE(c.limited_add(10, 100));
  EXPECT_FALSE(c.limited_add(1, 100));
  EXPECT_TRUE(c.limited_add(0, 100));
  EXPECT_TRUE(c.limited_add(-5, 0));  // n <= 0 always adds
  EXPECT_EQ(c.sum(), 95);
  EXPECT_FALSE(c.limited_add(1000, 100));  // at least the batch: the shared path
  EXPECT_TRUE(c.limited_add(5, 100));
  EXPECT_EQ(c.sum(), 100);
}

// Regression (tests/fuzz/c_api_fuzz): a limit so low that limit - error_bound() - n lies below
// INT64_MIN. The slot path's cap saturated at INT64_MIN, which a shared count of INT64_MIN
// passed, so the add went through past the limit.
TYPED_TEST(PercpuCounter, LimitedAddNearInt64MinKeepsTheLimit) {
  percpu::percpu_counter<TypeParam::value> c(1000);
  c.add(INT64_MIN);  // at least the batch: the shared count
  c.add(10);         // a slot, which has room for 72 more
  EXPECT_FALSE(c.limited_add(72, INT64_MIN + 1));
  EXPECT_EQ(c.sum(), INT64_MIN + 10);
  EXPECT_TRUE(c.limited_add(1, INT64_MIN + 11));
  EXPECT_EQ(c.sum(), INT64_MIN + 11);
}

// The budget: threads charge with limited_add() and release with sub(); a checker sees the
// exact value at most the limit at every sample, the totals balance, and once the threads stop
// the counter fills to exactly the limit (no room hides in a slot).
TYPED_TEST(PercpuCounter, LimitedAddNeverPassesTheLimitUnderConcurrency) {
  constexpr std::int64_t kLimit = 600;
  percpu::percpu_counter<TypeParam::value> c(32);
  constexpr int kThreads = 4;
  std::atomic<std::int64_t> net{0};
  std::atomic<bool> stop{false};
  std::atomic<std::int64_t> refusals{0};
  std::vector<std::thread> workers;
  for (int t = 0; t < kThreads; ++t) {
    workers.emplace_back([&, t] {
      std::minstd_rand rng(t + 7);
      std::vector<std::int64_t> held;
      for (int i = 0; i < 30000; ++i) {
        const std::int64_t n = 1 + static_cast<std::int64_t>(rng() % 40);  // some past the batch
        if (c.limited_add(n, kLimit)) {
          held.push_back(n);
          net += n;
        } else {
          ++refusals;
        }
        if (held.size() > 60 || (!held.empty() && rng() % 3 == 0)) {
          const std::int64_t back = held.back();
          held.pop_back();
          net -= back;
          c.sub(back);
        }
      }
      for (std::int64_t back : held) {
        net -= back;
        c.sub(back);
      }
    });
  }
  std::thread checker([&] {
    while (!stop.load()) ASSERT_LE(c.sum(), kLimit);
  });
  for (auto& w : workers) w.join();
  stop = true;
  checker.join();
  EXPECT_EQ(net.load(), 0);
  EXPECT_EQ(c.sum(), 0);
  EXPECT_GT(refusals.load(), 0) << "the limit was never reached: the test proves nothing";
  std::int64_t filled = 0;
  while (c.limited_add(7, kLimit)) filled += 7;
  EXPECT_EQ(filled, kLimit / 7 * 7);
  EXPECT_EQ(c.sum(), filled);
}

TYPED_TEST(PercpuCounter, PoolSlotsWork) {
  percpu::pool<TypeParam::value> pool;
  percpu::percpu_counter<TypeParam::value> a(pool, 4), b(pool, 4);
  for (int i = 0; i < 100; ++i) {
    a.add(1);
    b.add(2);
  }
  EXPECT_EQ(a.sum(), 100);
  EXPECT_EQ(b.sum(), 200);
}

// fork() while other threads fold and drain: the child's counter is whole (no fold copied half
// done: its value is all there) and usable (no lock copied held).
TYPED_TEST(PercpuCounter, ForkWhileOtherThreadsFoldLeavesTheChildsCounterWhole) {
#if PERCPU_TSAN
  GTEST_SKIP() << "ThreadSanitizer's runtime is not usable in a child forked from threads";
#endif
  percpu::percpu_counter<TypeParam::value> c(2);  // a fold every other add
  std::atomic<bool> stop{false};
  std::atomic<std::int64_t> done{0};
  std::vector<std::thread> workers;
  for (int t = 0; t < 2; ++t) {
    workers.emplace_back([&] {
      while (!stop.load(std::memory_order_relaxed)) {
        c.add(1);
        done.fetch_add(1, std::memory_order_seq_cst);
        if (c.limited_add(1, 1 << 30)) c.sub(1);
      }
    });
  }
  for (int i = 0; i < 30; ++i) {
    const std::int64_t before = done.load(std::memory_order_seq_cst);
    const int status = percpu::test::in_child(
        [&] {
          const std::int64_t s = c.sum();
          // The workers' adds completed by the fork are in it; one each may be in flight.
          if (s < before || s > done.load() + 2 + 2) return 1;
          c.add(5);
          if (c.sum() != s + 5) return 2;
          return c.limited_add(1, s + 5) ? 3 : 0;
        },
        10);
    ASSERT_EQ(status, 0) << "fork " << i;
  }
  stop = true;
  for (auto& w : workers) w.join();
  EXPECT_EQ(c.sum(), done.load());
}

}  // namespace
