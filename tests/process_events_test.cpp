// Process events around per-CPU operations: unloading code that ran sections, fork() while other
// threads are inside fallback operations, and fallback-mode ABA between pop and compare_store.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdint>

#include <percpu/percpu.h>
#include <atomic>
#include <thread>
#include <vector>

#include "child.h"

namespace {

using percpu::index_mode;
using percpu::status;
using percpu::test::in_child;

// The calling thread's rseq_cs field (the descriptor pointer the kernel reads).
std::uint64_t* rseq_cs_field() {
  return reinterpret_cast<std::uint64_t*>(percpu::arch::thread_pointer() +
                                          percpu::detail::g_hot.rseq_offset + 8);
}

// Spins in user code for `ms` milliseconds (the clock is read through the vDSO).
void spin_in_user_code(int ms) {
  timespec start{}, now{};
  clock_gettime(CLOCK_MONOTONIC, &start);
  do {
    for (int i = 0; i < 1000; ++i) asm volatile("");  // work the compiler cannot drop
    clock_gettime(CLOCK_MONOTONIC, &now);
  } while ((now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000 < ms);
}

// Makes the kernel look at the calling thread's rseq_cs in both ways it can: sleeping in system
// calls (older kernels check rseq_cs on every return to user space after a preemption), then
// being preempted and migrated while it runs user code (the reworked rseq code of 6.19+ may
// check it only when it interrupted user code, as no critical section contains a system call).
// A second thread competes for the CPU and moves this one between the allowed CPUs.
void be_preempted_often() {
  for (int i = 0; i < 50; ++i) {
    sched_yield();
    usleep(1000);
  }
  std::atomic<bool> stop{false};
  const pthread_t self = pthread_self();
  std::thread mover([&] {
    const std::vector<int>& cpus = percpu::machine_topology().allowed_cpus;
    for (std::size_t i = 0; !stop.load(std::memory_order_relaxed); ++i) {
      if (cpus.size() > 1) {
        cpu_set_t one;
        CPU_ZERO(&one);
        CPU_SET(cpus[i % cpus.size()], &one);
        pthread_setaffinity_np(self, sizeof(one), &one);
      }
      spin_in_user_code(1);
    }
  });
  spin_in_user_code(300);
  stop = true;
  mover.join();
}

TEST(ProcessEvents, UnloadingCodeThatRanSectionsIsSafeAfterPrepareUnload) {
  // Both threads that ran the plugin's sections call prepare_unload(), then the plugin goes.
  const int rc = in_child([] {
    void* h = dlopen(PERCPU_TEST_PLUGIN_PATH, RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) return 2;
    auto run = reinterpret_cast<long (*)(int)>(dlsym(h, "plugin_run"));
    if (run == nullptr) return 3;
    std::atomic<int> stage{0};
    std::thread other([&] {
      run(100);
      percpu::prepare_unload();
      stage = 1;
      while (stage.load() != 2) sched_yield();
      be_preempted_often();
    });
    run(100);
    percpu::prepare_unload();
    if (*rseq_cs_field() != 0) return 4;
    while (stage.load() != 1) sched_yield();
    if (dlclose(h) != 0) return 5;
    stage = 2;
    be_preempted_often();
    other.join();
    return percpu::current_cpu() >= 0 ? 0 : 6;
  });
  EXPECT_EQ(rc, 0);
}

TEST(ProcessEvents, AStaleDescriptorPointerAfterUnloadIsWhatTheKernelKills) {
  // Why prepare_unload() exists: a section leaves rseq_cs pointing at its descriptor, and a
  // thread that is not preempted between its last section and the unload still points there
  // when the plugin is gone. Made deterministic by putting back the pointer the sections left
  // (a preemption in between would have let the kernel clear it).
  if (!percpu::rseq_active()) GTEST_SKIP() << "fallback mode: no registered area";
  const int rc = in_child([] {
    void* h = dlopen(PERCPU_TEST_PLUGIN_PATH, RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) return 2;
    auto run = reinterpret_cast<long (*)(int)>(dlsym(h, "plugin_run"));
    if (run == nullptr) return 3;
    std::uint64_t left = 0;
    for (int i = 0; i < 1000 && left == 0; ++i) {
      run(1);
      left = __atomic_load_n(rseq_cs_field(), __ATOMIC_RELAXED);
    }
    if (left == 0) return 4;  // the sections left nothing armed: nothing to show
    if (dlclose(h) != 0) return 5;
    // Hold the descriptor's former page inaccessible, so that a mapping made later (a thread's
    // stack) cannot land there and turn the stale pointer into one to readable zeros.
    const long page = sysconf(_SC_PAGESIZE);
    void* at = reinterpret_cast<void*>(left & ~static_cast<std::uint64_t>(page - 1));
    if (mmap(at, page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0) != at)
      return 6;  // something else was mapped there already
    __atomic_store_n(rseq_cs_field(), left, __ATOMIC_RELAXED);
    be_preempted_often();
    return 0;
  });
  EXPECT_EQ(rc, 100 + SIGSEGV);
}

struct item {
  item* next = nullptr;
};

// Pushes `it` onto the list at `head` with compare_store on index 0 (in fallback mode the index
// is not checked), retrying until the head it read is still the head.
void push_onto(std::intptr_t& head, item* it) {
  for (;;) {
    const std::intptr_t h = __atomic_load_n(&head, __ATOMIC_RELAXED);
    it->next = reinterpret_cast<item*>(h);
    if (percpu::compare_store<index_mode::cpu_id>(&head, h, reinterpret_cast<std::intptr_t>(it),
                                                  0) == status::committed)
      return;
  }
}

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
          if (percpu::pop<index_mode::cpu_id>(&head, 0, 0, &out, 0) == status::committed)
            push_onto(head, reinterpret_cast<item*>(out));
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
  const int rc = in_child(
      [] {
        percpu::detail::enter_fallback("test: fallback ABA");
        constexpr int kItems = 8;
        static std::intptr_t head = 0;
        static item items[kItems];
        for (auto& it : items) {
          it.next = reinterpret_cast<item*>(head);
          head = reinterpret_cast<std::intptr_t>(&it);
        }
        std::atomic<bool> stop{false};
        std::thread popper([&] {
          while (!stop.load()) {
            std::intptr_t out;
            if (percpu::pop<index_mode::cpu_id>(&head, 0, 0, &out, 0) == status::committed)
              push_onto(head, reinterpret_cast<item*>(out));
          }
        });
        // 20000 rounds take 0.2 s here and 6-9 s in the arm64 VM (qemu TCG); with the host busy
        // (four spinning jobs on our 2 CPUs) the VM took 10-37 s with this budget and over 60 s
        // without it: a thread that holds a fallback stripe loses its host CPU, and the other
        // spins or retries for the whole host time slice. The budget and a longer alarm keep the
        // test about ABA, not about the host's load.
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        for (int round = 0; round < 20000; ++round) {
          if (round % 256 == 0 && std::chrono::steady_clock::now() > deadline) break;
          const std::intptr_t h = __atomic_load_n(&head, __ATOMIC_RELAXED);
          if (h == 0) continue;
          if (percpu::compare_store<index_mode::cpu_id>(&head, h, 0, 0) != status::committed)
            continue;
          for (item* it = reinterpret_cast<item*>(h); it != nullptr;) {
            item* next = it->next;
            push_onto(head, it);
            it = next;
          }
        }
        stop = true;
        popper.join();
        int count = 0;
        for (item* it = reinterpret_cast<item*>(head); it != nullptr && count <= kItems;
             it = it->next)
          ++count;
        return count == kItems ? 0 : 1;
      },
      300);
  EXPECT_EQ(rc, 0) << "list lost or duplicated items";
}

}  // namespace
