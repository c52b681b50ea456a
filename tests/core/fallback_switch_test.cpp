// The one-way switch from rseq mode to fallback mode, under load, in a forked child (the switch
// is permanent for a process): no update is lost across it, and a section that aborts every
// time (a debugger stepping through) ends through the fallback instead of spinning forever.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <percpu/percpu.h>
#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "child.h"
#include "slots.h"

namespace {

using percpu::index_mode;
using percpu::status;

using percpu::test::in_child;

TEST(FallbackSwitch, NoUpdateIsLostAcrossTheSwitch) {
  const int rc = in_child([] {
    auto slots = percpu::test::make_slots();
    constexpr int kThreads = 6;
    constexpr long kAdds = 400'000;
    std::vector<std::thread> pool;
    for (int t = 0; t < kThreads; ++t)
      pool.emplace_back([&] {
        for (long i = 0; i < kAdds; ++i)
          percpu::retry<index_mode::cpu_id>(
              [&](int idx) { return percpu::add<index_mode::cpu_id>(&slots[idx].value, 1, idx); });
      });
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    percpu::detail::enter_fallback("test: switch under load");
    for (auto& th : pool) th.join();
    if (percpu::test::sum(slots) != kThreads * kAdds) return 1;
    if (percpu::rseq_active()) return 2;
    if (percpu::registration().fallback_reason.empty()) return 3;
    return 0;
  });
  EXPECT_EQ(rc, 0);
}

TEST(FallbackSwitch, EndlessAbortsEndInTheFallback) {
  const int rc = in_child([] {
    auto slots = percpu::test::make_slots();
    long attempts = 0;
    // An attempt that "aborts" for as long as the process is in rseq mode, like a section under
    // a single-stepping debugger.
    const status s = percpu::retry<index_mode::cpu_id>([&](int idx) {
      ++attempts;
      if (percpu::rseq_active()) return status::aborted;
      return percpu::add<index_mode::cpu_id>(&slots[idx].value, 1, idx);
    });
    if (s != status::committed || percpu::test::sum(slots) != 1) return 1;
    const bool was_rseq = attempts > 1;
    if (was_rseq && attempts != percpu::kMaxConsecutiveRetries + 1) return 2;
    if (was_rseq && percpu::registration().fallback_reason.find("1000") == std::string::npos)
      return 3;
    return 0;
  });
  EXPECT_EQ(rc, 0);
}

}  // namespace
