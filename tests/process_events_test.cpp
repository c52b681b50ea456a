// Process events around per-CPU operations: unloading code that ran sections, fork() while other
// threads are inside fallback operations, and fallback-mode ABA between pop and compare_store.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <sched.h>

#include <percpu/percpu.h>
#include <atomic>
#include <thread>
#include <vector>

#include "child.h"

namespace {

using percpu::index_mode;
using percpu::status;
using percpu::test::in_child;

TEST(ProcessEvents, UnloadingCodeThatRanSectionsIsSafe) {
  // After dlclose() the module's rseq_cs descriptors are unmapped; the thread must not point the
  // kernel at them (it would be killed at the next preemption).
  void* h = dlopen(PERCPU_TEST_PLUGIN_PATH, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(h, nullptr) << dlerror();
  auto run = reinterpret_cast<long (*)(int)>(dlsym(h, "plugin_run"));
  ASSERT_NE(run, nullptr);
  EXPECT_EQ(run(100), 100);
  ASSERT_EQ(dlclose(h), 0);
  for (int i = 0; i < 100; ++i) {  // preemptions, migrations and system calls
    sched_yield();
    usleep(1000);
  }
  EXPECT_GE(percpu::current_cpu(), 0);
}

struct item {
  item* next = nullptr;
};

TEST(ProcessEvents, ForkWhileOtherThreadsRunFallbackOperations) {
  const int rc = in_child([] {
    percpu::detail::enter_fallback("test: fork under fallback load");
    static std::intptr_t head = 0;
    static item items[4];
    std::atomic<bool> stop{false};
    std::vector<std::thread> pool;
    for (int t = 0; t < 3; ++t)
      pool.emplace_back([&] {
        while (!stop.load(std::memory_order_relaxed)) {
          std::intptr_t out;
          if (percpu::pop<index_mode::cpu_id>(&head, 0, 0, &out, 0) == status::committed) {
            auto* it = reinterpret_cast<item*>(out);
            for (;;) {
              const std::intptr_t h = __atomic_load_n(&head, __ATOMIC_RELAXED);
              it->next = reinterpret_cast<item*>(h);
              if (percpu::compare_store<index_mode::cpu_id>(
                      &head, h, reinterpret_cast<std::intptr_t>(it), 0) == status::committed)
                break;
            }
          }
        }
      });
    for (auto& it : items) {
      it.next = reinterpret_cast<item*>(head);
      head = reinterpret_cast<std::intptr_t>(&it);
    }
    int failures = 0;
    for (int f = 0; f < 50; ++f) {
      // Each grandchild must be able to run fallback operations at once (no inherited lock).
      failures += in_child(
                      [] {
                        std::intptr_t out;
                        (void)percpu::pop<index_mode::cpu_id>(&head, 0, 0, &out, 0);
                        (void)percpu::compare_store<index_mode::cpu_id>(&head, -1, 0, 0);
                        return 0;
                      },
                      5) != 0;
    }
    stop = true;
    for (auto& th : pool) th.join();
    return failures;
  });
  EXPECT_EQ(rc, 0) << "grandchildren that hung or failed";
}

TEST(ProcessEvents, FallbackPopAndDetachDoNotAba) {
  // In fallback mode two threads share one list (the index is not checked): one pops and
  // pushes back, the other detaches the whole list with compare_store and pushes it back. Every
  // item must end up in the list exactly once.
  const int rc = in_child([] {
    percpu::detail::enter_fallback("test: fallback ABA");
    constexpr int kItems = 8;
    static std::intptr_t head = 0;
    static item items[kItems];
    for (auto& it : items) {
      it.next = reinterpret_cast<item*>(head);
      head = reinterpret_cast<std::intptr_t>(&it);
    }
    auto push = [](item* it) {
      for (;;) {
        const std::intptr_t h = __atomic_load_n(&head, __ATOMIC_RELAXED);
        it->next = reinterpret_cast<item*>(h);
        if (percpu::compare_store<index_mode::cpu_id>(&head, h, reinterpret_cast<std::intptr_t>(it),
                                                      0) == status::committed)
          return;
      }
    };
    std::atomic<bool> stop{false};
    std::thread popper([&] {
      while (!stop.load()) {
        std::intptr_t out;
        if (percpu::pop<index_mode::cpu_id>(&head, 0, 0, &out, 0) == status::committed)
          push(reinterpret_cast<item*>(out));
      }
    });
    for (int round = 0; round < 20000; ++round) {
      const std::intptr_t h = __atomic_load_n(&head, __ATOMIC_RELAXED);
      if (h == 0) continue;
      if (percpu::compare_store<index_mode::cpu_id>(&head, h, 0, 0) != status::committed) continue;
      for (item* it = reinterpret_cast<item*>(h); it != nullptr;) {
        item* next = it->next;
        push(it);
        it = next;
      }
    }
    stop = true;
    popper.join();
    int count = 0;
    for (item* it = reinterpret_cast<item*>(head); it != nullptr && count <= kItems; it = it->next)
      ++count;
    return count == kItems ? 0 : 1;
  });
  EXPECT_EQ(rc, 0) << "list lost or duplicated items";
}

}  // namespace
