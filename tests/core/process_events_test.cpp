// Process events around per-CPU operations: unloading code that ran sections, fork() while other
// threads are inside fallback operations, and fallback-mode ABA between pop and compare_store.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdint>

#include <percpu/percpu.h>
#include <atomic>
#include <cstdlib>
#include <string>
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

// Loads the test plugin (tests/plugin.cpp) and finds its plugin_run; false when either failed.
bool load_plugin(void*& handle, long (*&run)(int)) {
  handle = dlopen(PERCPU_TEST_PLUGIN_PATH, RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) return false;
  run = reinterpret_cast<long (*)(int)>(dlsym(handle, "plugin_run"));
  return run != nullptr;
}

TEST(ProcessEvents, UnloadingCodeThatRanSectionsIsSafeAfterPrepareUnload) {
  // Both threads that ran the plugin's sections call prepare_unload(), then the plugin goes.
  const int rc = in_child([] {
    void* h = nullptr;
    long (*run)(int) = nullptr;
    if (!load_plugin(h, run)) return 2;
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

// Sleeps, yields, spins and moves between the allowed CPUs for a few milliseconds: every way
// the kernel looks at the calling thread's rseq_cs, briefly (for tests of many rounds).
void be_preempted_briefly() {
  const std::vector<int>& cpus = percpu::machine_topology().allowed_cpus;
  cpu_set_t saved;
  sched_getaffinity(0, sizeof(saved), &saved);
  for (std::size_t i = 0; i < cpus.size() && i < 4; ++i) {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpus[i], &one);
    sched_setaffinity(0, sizeof(one), &one);
    spin_in_user_code(1);
  }
  sched_setaffinity(0, sizeof(saved), &saved);
  for (int i = 0; i < 5; ++i) {
    sched_yield();
    usleep(200);
  }
}

std::atomic<long> g_alarms{0};

// SIGALRM every 200 us for the rest of the (child) process; the handler runs a getcpu-cache
// read, as a handler using percpu would.
void start_alarm_storm() {
  struct sigaction sa = {};
  sa.sa_handler = [](int) {
    (void)percpu::current_cpu();
    g_alarms.fetch_add(1, std::memory_order_relaxed);
  };
  sa.sa_flags = SA_RESTART;
  sigaction(SIGALRM, &sa, nullptr);
  const itimerval every = {{0, 200}, {0, 200}};
  setitimer(ITIMER_REAL, &every, nullptr);
}

// Blocks SIGALRM on the calling thread for a scope.
class alarm_blocked {
 public:
  alarm_blocked() {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGALRM);
    pthread_sigmask(SIG_BLOCK, &set, &saved_);
  }
  ~alarm_blocked() { pthread_sigmask(SIG_SETMASK, &saved_, nullptr); }

 private:
  sigset_t saved_;
};

// Blocks in read() until a byte arrives on `fd` (the kernel leaves rseq_cs alone meanwhile).
void wait_for_byte(int fd) {
  char c;
  while (read(fd, &c, 1) < 0 && errno == EINTR) {
  }
}

TEST(ProcessEvents, UnloadingCodeThatRanSectionsIsSafeWithoutPrepareUnload) {
  // 25 rounds: the plugin runs its sections on this thread and two others, the others go to
  // sleep still pointing at its descriptors (SIGALRM blocked, so that no signal lets the kernel
  // clear their rseq_cs first), the plugin is dlclose()d with nothing called, and then the
  // others wake up under the SIGALRM storm, are preempted and migrated. Without the plugin's
  // unload teardown (unload_teardown.h) the kernel kills the process in the first rounds.
  const int rc = in_child([] {
    start_alarm_storm();
    constexpr int kOthers = 2;
    for (int round = 0; round < 25; ++round) {
      void* h = nullptr;
      long (*run)(int) = nullptr;
      if (!load_plugin(h, run)) return 2;
      int wake[2];
      if (pipe(wake) != 0) return 4;
      std::atomic<int> ran{0};
      std::vector<std::thread> others;
      for (int i = 0; i < kOthers; ++i)
        others.emplace_back([&] {
          {
            alarm_blocked no_alarm;
            run(50);
            ran.fetch_add(1);
            wait_for_byte(wake[0]);
          }
          be_preempted_briefly();
        });
      run(50);
      while (ran.load() != kOthers) sched_yield();
      if (dlclose(h) != 0) return 5;
      if (write(wake[1], "xx", kOthers) != kOthers) return 6;
      be_preempted_briefly();
      for (auto& t : others) t.join();
      close(wake[0]);
      close(wake[1]);
    }
    return g_alarms.load() > 0 ? 0 : 7;
  });
  EXPECT_EQ(rc, 0);
}

TEST(ProcessEvents, UnloadingClearsAnotherThreadsPointerIntoThePlugin) {
  // Another thread runs the plugin's sections until one leaves its rseq_cs armed, and sleeps;
  // after dlclose() its rseq_cs is 0. The descriptor's former page is then held inaccessible,
  // so that a pointer left there would be fatal when the thread wakes.
  if (!percpu::rseq_active()) GTEST_SKIP() << "fallback mode: no registered area";
  const int rc = in_child([] {
    for (int attempt = 0; attempt < 20; ++attempt) {
      void* h = nullptr;
      long (*run)(int) = nullptr;
      if (!load_plugin(h, run)) return 2;
      int wake[2];
      if (pipe(wake) != 0) return 4;
      std::atomic<std::uint64_t*> field{nullptr};
      std::uint64_t left = 0;
      std::thread other([&] {
        for (int i = 0; i < 1000 && left == 0; ++i) {
          run(1);
          left = __atomic_load_n(rseq_cs_field(), __ATOMIC_RELAXED);
        }
        field.store(rseq_cs_field());
        wait_for_byte(wake[0]);
      });
      while (field.load() == nullptr) sched_yield();
      usleep(10000);  // the other thread is asleep in read()
      // Conclusive only if nothing (a preemption before the read) cleared it already.
      const bool armed = left != 0 && __atomic_load_n(field.load(), __ATOMIC_RELAXED) == left;
      if (dlclose(h) != 0) return 5;
      const std::uint64_t after = __atomic_load_n(field.load(), __ATOMIC_RELAXED);
      if (armed) {
        const long page = sysconf(_SC_PAGESIZE);
        void* at = reinterpret_cast<void*>(left & ~static_cast<std::uint64_t>(page - 1));
        (void)mmap(at, page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
      }
      if (write(wake[1], "x", 1) != 1) return 6;
      other.join();
      close(wake[0]);
      close(wake[1]);
      if (armed) return after == 0 ? 0 : 8;
    }
    return 9;  // never found the other thread armed and asleep
  });
  EXPECT_EQ(rc, 0);
}

// The plugin of the test below, closed by its exit handler.
void* g_exit_plugin = nullptr;

TEST(ProcessEvents, APluginClosedFromAnExitHandlerIsDisarmedToo) {
  // A program whose exit handler (or static destructor) closes a plugin while a thread that ran
  // its sections is still alive: the teardown must disarm then too (it does nothing only once
  // exit() reaches the objects still loaded). Without it the worker is killed at its next
  // preemption after the dlclose().
  const int rc = in_child([] {
    // Registered before the plugin is opened, as a static object's destructor is.
    std::atexit([] {
      if (dlclose(g_exit_plugin) != 0) _exit(5);
      spin_in_user_code(200);  // the worker runs (and is preempted) with the plugin gone
      _exit(0);
    });
    long (*run)(int) = nullptr;
    if (!load_plugin(g_exit_plugin, run)) return 2;
    std::atomic<bool> ran{false};
    std::thread worker([&] {
      run(100);
      ran = true;
      for (;;) be_preempted_briefly();  // until the process ends
    });
    worker.detach();
    while (!ran.load()) sched_yield();
    std::exit(7);  // the handler ends the process first
  });
  EXPECT_EQ(rc, 0);
}

TEST(ProcessEvents, CProgramsUnloadingThePluginWithoutPrepareUnloadSurvive) {
  // unload_c_main.c, linked with libpercpu.so and linked with nothing of percpu.
  bool no_static_tls = false;
  for (const char* program : {PERCPU_UNLOAD_C_MAIN_LINKED_PATH, PERCPU_UNLOAD_C_MAIN_PATH}) {
    const int rc = in_child([program] {
      execl(program, program, PERCPU_TEST_PLUGIN_PATH, static_cast<char*>(nullptr));
      return 127;
    });
    // 77: the plugin could not load libpercpu.so (no static TLS left for its initial-exec
    // thread-locals in a process that did not link it).
    if (rc == 77 && program == std::string(PERCPU_UNLOAD_C_MAIN_PATH)) {
      no_static_tls = true;
      continue;
    }
    EXPECT_EQ(rc, 0) << program;
  }
  if (no_static_tls)
    GTEST_SKIP() << "the program linked with nothing of percpu could not dlopen libpercpu.so: "
                    "cannot allocate memory in static TLS block (the linked one passed)";
}

TEST(ProcessEvents, AStaleDescriptorPointerAfterUnloadIsWhatTheKernelKills) {
  // What the unload teardown prevents: a section leaves rseq_cs pointing at its descriptor, and
  // a thread that is not preempted between its last section and the unload still points there
  // when the plugin is gone. Made deterministic by putting back, after dlclose() (whose teardown
  // cleared it), the pointer the sections left (a preemption in between would have let the
  // kernel clear it).
  if (!percpu::rseq_active()) GTEST_SKIP() << "fallback mode: no registered area";
  const int rc = in_child([] {
    void* h = nullptr;
    long (*run)(int) = nullptr;
    if (!load_plugin(h, run)) return 2;
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
