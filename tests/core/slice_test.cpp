// Time-slice extension (slice.h): what enable_slice_extension() reports for the kernel and area
// at hand, requests that change nothing where the kernel lacks the feature, the request byte's
// life where it has it, grants under contention for the CPU, and locks that request while held
// still excluding each other. PERCPU_EXPECT_SLICE=on (scripts/run-slice-vm.sh, on a kernel built
// with CONFIG_RSEQ_SLICE_EXTENSION and percpu's own area) makes the enabled case required rather
// than skipped; =off requires it to be unavailable.
#include <errno.h>
#include <sys/utsname.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <percpu/percpu.h>

#include "expect.h"
#include "pin.h"

namespace {

using namespace percpu;

std::string expected_slice() {
  const char* e = std::getenv("PERCPU_EXPECT_SLICE");
  return e ? e : "";
}

// The kernel's major version (7 for 7.2.13).
int kernel_major() {
  utsname u{};
  uname(&u);
  return std::atoi(u.release);
}

// The calling thread's slice_ctrl bytes: request, granted.
std::uint8_t request_byte() {
  return detail::slice_ctrl()[0];
}

TEST(SliceExtension, ReportsWhatTheKernelAndTheAreaOffer) {
  const slice_support s = enable_slice_extension();
  EXPECT_EQ(s.enabled, s.error == 0);
  EXPECT_FALSE(s.reason.empty());
  if (s.enabled) {
    EXPECT_TRUE(s.kernel_offers);
  }
  if (test::expected_mode() == "fallback" || !rseq_active()) {
    EXPECT_EQ(s.error, ENXIO) << s.reason;  // fallback mode: no area to enable it for
  }
  if (kernel_major() < 7 && rseq_active()) {
    EXPECT_EQ(s.error, EINVAL) << s.reason;  // the prctl option does not exist before 7.0
    EXPECT_FALSE(s.kernel_offers);
  }
  if (expected_slice() == "on") {
    EXPECT_TRUE(s.enabled) << s.reason;
  }
  if (expected_slice() == "off") {
    EXPECT_FALSE(s.enabled) << s.reason;
  }
  // Asking again gives the same answer.
  const slice_support again = enable_slice_extension();
  EXPECT_EQ(again.enabled, s.enabled);
  EXPECT_EQ(again.error, s.error);
}

TEST(SliceExtension, AThreadAsksOnItsFirstRequest) {
  std::thread([] {
    EXPECT_EQ(detail::t_slice_state, 0);
    const bool requested = slice_request();
    EXPECT_NE(detail::t_slice_state, 0);
    EXPECT_EQ(requested, detail::t_slice_state == 1);
    slice_release(requested);
    if (requested) {
      EXPECT_EQ(this_thread_slice_stats().requests, 1u);
    }
  }).join();
}

TEST(SliceExtension, WhereUnavailableARequestChangesNothing) {
  const slice_support s = enable_slice_extension();
  if (s.enabled) GTEST_SKIP() << "the extension is enabled here";
  if (rseq_active()) {
    const std::uint8_t before = request_byte();
    {
      slice_guard g;
      EXPECT_FALSE(g.requested());
      EXPECT_EQ(request_byte(), before);
    }
    EXPECT_EQ(request_byte(), before);
  }
  EXPECT_EQ(this_thread_slice_stats().requests, 0u);
}

TEST(SliceExtension, ARequestSetsTheByteAndItsReleaseClearsIt) {
  const slice_support s = enable_slice_extension();
  if (!s.enabled) GTEST_SKIP() << s.reason;
  const slice_stats before = this_thread_slice_stats();
  {
    slice_guard g;
    ASSERT_TRUE(g.requested());
    // Set by the request; the kernel clears it when it grants an extension (and sets granted).
    const volatile std::uint8_t* ctrl = detail::slice_ctrl();
    EXPECT_TRUE(ctrl[0] == 1 || ctrl[1] == 1);
  }
  EXPECT_EQ(request_byte(), 0);
  EXPECT_EQ(this_thread_slice_stats().requests, before.requests + 1);
}

// Nested requests (a recursive mutex, two locks, a handler inside a held section): only the
// outermost sets and clears the byte; after a grant an inner request does not set it again, and
// only the outermost release yields. Where the kernel lacks the feature the test plays the
// kernel's part on the area's bytes 28-29 (which such a kernel never reads or writes) by
// marking the thread enabled; a kernel that has it would grant on its own, so it is skipped there.
TEST(SliceExtension, RequestsNestAndOnlyTheOutermostEnds) {
  if (!rseq_active()) GTEST_SKIP() << "fallback mode: no rseq area";
  std::thread([] {
    if (enable_slice_extension().enabled) GTEST_SKIP() << "the kernel grants by itself here";
    detail::t_slice_state = 1;  // play the enabled case
    volatile std::uint8_t* ctrl = detail::slice_ctrl();
    const slice_stats before = this_thread_slice_stats();
    const bool outer = slice_request();
    EXPECT_EQ(ctrl[0], 1);
    ctrl[0] = 0;  // the kernel grants: clears the request, sets granted
    ctrl[1] = 1;
    const bool inner = slice_request();
    EXPECT_EQ(ctrl[0], 0) << "an inner request set the byte again after a grant";
    slice_release(inner);
    EXPECT_EQ(this_thread_slice_stats().granted, before.granted) << "an inner release yielded";
    slice_release(outer);
    EXPECT_EQ(ctrl[0], 0);
    EXPECT_EQ(this_thread_slice_stats().granted, before.granted + 1);
    EXPECT_EQ(this_thread_slice_stats().requests, before.requests + 1);
    ctrl[1] = 0;
    // A release with no request open (another thread's lock) changes nothing.
    slice_release(true);
    EXPECT_EQ(ctrl[0], 0);
    EXPECT_EQ(detail::t_slice_depth, 0u);
    detail::t_slice_state = 2;
  }).join();
}

// Two threads on one CPU: one spins outside requests, the other spends most of its time inside
// requests of about 20 µs. When the scheduler wants the CPU for the spinner while the requester
// is inside one, the kernel grants an extension; the release sees it and yields.
TEST(SliceExtension, TheKernelGrantsExtensionsUnderContention) {
  const slice_support s = enable_slice_extension();
  if (!s.enabled) GTEST_SKIP() << s.reason;
  std::atomic<bool> stop{false};
  std::atomic<bool> failed_pin{false};
  std::thread spinner([&] {
    test::pinned pin(0);
    if (!pin.ok()) failed_pin = true;
    while (!stop.load(std::memory_order_relaxed)) {
    }
  });
  slice_stats got{};
  std::thread requester([&] {
    test::pinned pin(0);
    if (!pin.ok()) failed_pin = true;
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < end && this_thread_slice_stats().granted < 20) {
      const bool requested = slice_request();
      const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(20);
      while (std::chrono::steady_clock::now() < until) {  // vDSO: no system call
      }
      slice_release(requested);
    }
    got = this_thread_slice_stats();
  });
  requester.join();
  stop = true;
  spinner.join();
  ASSERT_FALSE(failed_pin);
  EXPECT_GT(got.requests, 0u);
  EXPECT_GT(got.granted, 0u) << got.requests << " requests, none granted in 10 s";
  EXPECT_LE(got.yielded, got.granted);
}

// Four threads on one CPU hold the mutex for about 20 µs at a time, so the scheduler often wants
// the CPU while a holder's request is set: with the extension, holders get grants, and the
// releases that wake a waiter (a futex call) must not run with the request set (the kernel's
// rseq debug mode would kill the thread). Exclusion holds either way.
TEST(SliceExtended, AMutexThatRequestsStillExcludes) {
  slice_extended<std::mutex> m;
  long total = 0;
  std::atomic<std::uint64_t> granted{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      test::pinned pin(0);
      for (int i = 0; i < 2000; ++i) {
        std::lock_guard<slice_extended<std::mutex>> hold(m);
        ++total;
        const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(20);
        while (std::chrono::steady_clock::now() < until) {
        }
      }
      if (detail::t_slice_state == 1) {
        EXPECT_EQ(request_byte(), 0);
      }
      granted += this_thread_slice_stats().granted;
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(total, 4 * 2000);
  if (expected_slice() == "on") {
    EXPECT_GT(granted.load(), 0u);
  }
}

TEST(SliceExtended, ASpinlockThatRequestsStillExcludes) {
  spinlock<index_mode::cpu_id, slice_extension::request> lock;
  std::vector<long> per_index(static_cast<std::size_t>(lock.slots()), 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 20000; ++i) {
        if (i % 2 == 0) {
          decltype(lock)::guard g(lock);
          ++per_index[static_cast<std::size_t>(g.index())];
        } else {
          const int index = lock.lock();
          ++per_index[static_cast<std::size_t>(index)];
          lock.unlock(index);
        }
        if (detail::t_slice_state == 1) {
          EXPECT_EQ(request_byte(), 0);
        }
      }
    });
  for (auto& t : threads) t.join();
  long total = 0;
  for (long v : per_index) total += v;
  EXPECT_EQ(total, 4 * 20000);
}

}  // namespace
