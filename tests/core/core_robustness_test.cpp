// Faults users found: CPU ids beyond what sysfs shows (a container's view, a CPU that appears
// after startup), and remote drains of a CPU that the draining thread cannot reach without
// membarrier. Each must end in exact counts or a clear error value, never in corruption.
#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>
#include <seccomp.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <fstream>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include <percpu/percpu.h>

#include "child.h"
#include "cut_off.h"
#include "expect.h"
#include "pin.h"
#include "shell.h"
#include "sysfs_view.h"

namespace {

using percpu::test::cut_off_this_thread;
using percpu::test::run_in_sysfs_view;
using percpu::test::second_cpu;

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// index_space_check's verdict: every count exact, in both index modes, and percpu malloc's
// blocks intact.
void expect_exact_counts(const percpu::test::view_run& r) {
  EXPECT_EQ(r.status, 0) << r.out;
  for (const char* line : {"cpu_id: counter 1000 of 1000, list 100 of 100",
                           "mm_cid: counter 1000 of 1000, list 100 of 100",
                           "malloc: 2000 blocks allocated and freed intact"})
    EXPECT_TRUE(contains(r.out, line)) << r.out;
}

// A container whose sysfs hides CPUs: sysfs says the machine has CPU 0 only, the program runs on
// CPU 1. Before the fix the counter read back 0 (its adds went past the single slot).
TEST(IndexSpace, SysfsShowingFewerCpusThanTheKernelHas) {
  const int cpu = second_cpu();
  if (cpu < 1) GTEST_SKIP() << "needs a second CPU";
  const auto r = run_in_sysfs_view("0", cpu, {PERCPU_INDEX_SPACE_CHECK_PATH});
  if (r.status == 77) GTEST_SKIP() << r.skip;
  expect_exact_counts(r);
  // The affinity mask contradicts sysfs: the index spaces are sized by the kernel's limit, so
  // the thread keeps its rseq fast paths.
  EXPECT_TRUE(contains(r.out, "outside the possible CPUs")) << r.out;
  if (percpu::test::expected_mode() != "fallback") {
    EXPECT_TRUE(contains(r.out, "mode rseq")) << r.out;
  }
}

// sysfs and the affinity mask agree on CPU 0 at startup; then the program moves to CPU 1, an id
// beyond its index space: it must switch to fallback mode and keep every count exact.
TEST(IndexSpace, ACpuIdThatAppearsAfterStartupSwitchesToFallbackMode) {
  const int cpu = second_cpu();
  if (cpu < 1) GTEST_SKIP() << "needs a second CPU";
  const auto r =
      run_in_sysfs_view("0", 0, {PERCPU_INDEX_SPACE_CHECK_PATH, "--move-to", std::to_string(cpu)});
  if (r.status == 77) GTEST_SKIP() << r.skip;
  expect_exact_counts(r);
  EXPECT_TRUE(contains(r.out, "index spaces 1/1, mismatch: none")) << r.out;
  EXPECT_TRUE(contains(r.out, "mode fallback")) << r.out;
  if (percpu::test::expected_mode() != "fallback") {
    EXPECT_TRUE(contains(r.out, "outside the index space [0, 1)")) << r.out;
  }
}

// The same view under stress: before the fix, the short stress lost hundreds of
// thousands of updates and crashed in the memcpy buffer's child.
TEST(IndexSpace, StressUnderASysfsViewOfOneCpu) {
  if (second_cpu() < 1) GTEST_SKIP() << "needs a second CPU";
  const auto r =
      run_in_sysfs_view("0", -1, {PERCPU_CLI_PATH, "stress", "--short", "--reps", "3000"});
  if (r.status == 77) GTEST_SKIP() << r.skip;
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_TRUE(contains(r.out, "22 runs, 0 failed")) << r.out;
}

TEST(IndexSpace, SizedFromEverySourceThatBoundsIt) {
  struct row {
    std::vector<int> possible, online, allowed;
    const char* source;
    int kernel_limit, bound;
    bool mismatch;
  };
  const row rows[] = {
      {{0, 1}, {0, 1}, {0, 1}, "sysfs", 64, 2, false},      // all agree: tight
      {{0, 1, 2, 3}, {0, 1}, {1}, "sysfs", 64, 4, false},   // spare possible CPUs
      {{0}, {0}, {1}, "sysfs", 64, 64, true},               // the container above
      {{0}, {0, 1, 2}, {0}, "sysfs", 64, 64, true},         // online beyond possible
      {{0}, {0}, {5}, "sysfs", 0, 6, true},                 // no kernel limit: what we saw
      {{0, 1}, {0, 1}, {0, 1}, "sysconf", 128, 128, true},  // no sysfs list at all
      {{0, 1, 254, 255}, {0, 1}, {0}, "sysfs", 256, 256, false},
      {{0, 1, 254, 255}, {0, 1}, {0}, "sysfs", 0, 256, false},  // no limit: trust sysfs
      {{0, 1, 2, 3}, {0, 1, 2, 3}, {0}, "sysfs", 0, 4, false},
      {{0, 1, 1048575}, {0, 1}, {0, 1}, "sysfs", 64, 64, true},  // sysfs beyond the kernel
  };
  for (const row& w : rows) {
    percpu::topology t;
    t.possible_cpus = w.possible;
    t.online_cpus = w.online;
    t.allowed_cpus = w.allowed;
    t.possible_source = w.source;
    t.kernel_cpu_limit = w.kernel_limit;
    percpu::size_index_spaces(t);
    EXPECT_EQ(t.cpu_id_bound, w.bound) << percpu::format_cpu_list(w.possible);
    EXPECT_EQ(t.mm_cid_bound, w.bound);
    EXPECT_EQ(!t.mismatch.empty(), w.mismatch) << t.mismatch;
  }
}

TEST(IndexSpace, TheKernelLimitCoversEveryCpuItRuns) {
  const int limit = percpu::probe_kernel_cpu_limit();
  if (limit == 0) GTEST_SKIP() << "sched_getaffinity could not be probed here";
  EXPECT_EQ(limit % 64, 0);
  for (int cpu : percpu::machine_topology().online_cpus) EXPECT_LT(cpu, limit);
}

// ---- Remote drains where no fence can be had ----

struct item {
  item* next = nullptr;
};

// A thread of the process keeps running on the drained CPU, which the drainer cannot reach:
// the drain is refused with remote_errc::no_fence and the list keeps every item. Once that
// thread is gone, the same drain succeeds.
// Unregisters glibc's area of the calling thread (the kernel resets its cpu_id to -1 and its
// mm_cid to 0); false when no length the area may be registered with is accepted.
bool unregister_glibc_area(std::intptr_t off) {
  void* area = percpu::arch::thread_pointer() + off;
  const percpu::registration_info reg = percpu::registration();
  for (unsigned len : {32u, unsigned{reg.area_extent}, static_cast<unsigned>(reg.feature_size)})
    if (len != 0 &&
        syscall(SYS_rseq, area, len, percpu::abi::kFlagUnregister, percpu::abi::kSignature) == 0)
      return true;
  return false;
}

// The operations of the test below, after the area was unregistered (first == 0: counter adds;
// 1: current_mm_cid(), then adds); 0, or what failed.
[[gnu::noinline]] int use_after_unregistration(
    percpu::counter<std::int64_t, percpu::index_mode::mm_cid>& c, int first) {
  if (first == 0) {
    for (int i = 0; i < 1000; ++i) c.add(1);  // the structures' sections
    return 0;
  }
  const int cid = percpu::current_mm_cid();  // the getcpu cache
  for (int i = 0; i < 1000; ++i) c.add(1);
  return cid < 0 || cid >= percpu::machine_topology().mm_cid_bound ? 10 : 0;
}

// A thread whose glibc area is not registered holds cpu_id -1 and mm_cid 0: a valid-looking id
// the kernel does not guard. (glibc 2.35+ ends a process whose new thread fails to register,
// so the test unregisters the area; a thread made by raw clone() is in this state too.) mm_cid
// mode must not use it: the thread's first operation, whichever it is, moves the process to
// fallback mode, and the count stays exact.
TEST(Registration, AThreadWhoseGlibcAreaIsUnregisteredNeverUsesItsMmCid) {
  if (percpu::registration().owner != percpu::area_owner::glibc || !percpu::rseq_active())
    GTEST_SKIP() << "needs glibc's registration in rseq mode";
  const std::intptr_t off = percpu::registration().rseq_offset;
  for (int first = 0; first < 2; ++first) {
    const int status = percpu::test::in_child([first, off] {
      percpu::counter<std::int64_t, percpu::index_mode::mm_cid> c;
      for (int i = 0; i < 100; ++i) c.add(1);  // a registered thread's adds, in rseq mode
      int result = 0;
      std::thread unregistered([&] {
        if (!unregister_glibc_area(off)) {
          result = 77;
          return;
        }
        // In a function of its own: percpu's check may be hoisted within a function (the area of
        // a running thread is never unregistered), so it must not see the unregistration.
        result = use_after_unregistration(c, first);
      });
      unregistered.join();
      if (result != 0) return result;
      if (percpu::rseq_active()) return 11;  // the thread's operations ran on mm_cid 0
      if (c.load() != 1100) return 12;
      if (percpu::registration().fallback_reason.find("registration failed") == std::string::npos)
        return 13;
      return 0;
    });
    if (status == 77) GTEST_SKIP() << "the kernel refused to unregister glibc's area";
    EXPECT_EQ(status, 0) << (first == 0 ? "counter add first" : "current_mm_cid() first");
  }
}

// A thread that spins on `cpu` until stop(): a CPU a cut-off thread cannot fence by observation.
class busy_on {
 public:
  explicit busy_on(int cpu)
      : thread_([this, cpu] {
          percpu::test::pinned on(cpu);
          running_ = true;
          while (!stop_.load(std::memory_order_relaxed)) {
          }
        }) {
    while (!running_) sched_yield();
  }
  ~busy_on() { stop(); }
  void stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }

 private:
  std::atomic<bool> running_{false}, stop_{false};
  std::thread thread_;
};

TEST(RemoteDrain, NoFenceIsAnErrorValueAndNothingMoves) {
  const int cpu = second_cpu();
  if (cpu < 1) GTEST_SKIP() << "needs a second CPU";
  if (!percpu::rseq_active()) GTEST_SKIP() << "fallback mode has no sections to fence";
  const int status = percpu::test::in_child([cpu] {
    percpu::freelist<item> list;
    std::vector<item> items(10);
    {
      percpu::test::pinned on(cpu);
      if (!on.ok()) return 10;
      for (item& it : items) list.push(&it);
    }
    if (list.count_quiescent(cpu) != items.size()) return 11;  // (a migration moved a push)
    busy_on busy(cpu);
    if (!cut_off_this_thread()) return 12;
    const percpu::remote_result<item*> refused = list.try_drain(cpu);
    if (refused.error != percpu::remote_errc::no_fence || refused.value != nullptr) return 13;
    if (list.count_quiescent(cpu) != items.size()) return 14;
    try {
      list.drain(cpu);
      return 15;
    } catch (const std::system_error& e) {
      if (e.code() != percpu::remote_errc::no_fence) return 16;
    }
    busy.stop();
    const percpu::remote_result<item*> drained = list.try_drain(cpu);
    if (drained.error) return 17;
    std::size_t n = 0;
    for (item* p = drained.value; p; p = p->next) ++n;
    return n == items.size() ? 0 : 18;
  });
  EXPECT_EQ(status, 0);
}

// A writer of percpu_rwsem and a kill() of percpu_ref that cannot fence (membarrier denied, the
// thread kept off a CPU where another thread runs) report no_fence and change nothing.
TEST(ReadMostly, NoFenceIsAnErrorAndTheStateStaysAsItWas) {
  const int cpu = second_cpu();
  if (cpu < 1) GTEST_SKIP() << "needs a second CPU";
  if (!percpu::rseq_active()) GTEST_SKIP() << "fallback mode has no sections to fence";
  const int status = percpu::test::in_child([cpu] {
    percpu::percpu_rwsem<> lock;
    int released = 0;
    percpu::percpu_ref<> ref([&] { ++released; });
    busy_on busy(cpu);
    if (!cut_off_this_thread()) return 12;
    const percpu::remote_result<bool> refused = lock.try_lock_or_error();
    if (refused.error != percpu::remote_errc::no_fence || refused.value) return 13;
    if (!lock.readers_per_cpu() || !lock.try_lock_shared()) return 14;  // reopened
    lock.unlock_shared();
    try {
      lock.lock();
      return 15;
    } catch (const std::system_error& e) {
      if (e.code() != percpu::remote_errc::no_fence) return 16;
    }
    if (ref.try_kill() != percpu::remote_errc::no_fence || ref.is_dying()) return 17;
    try {
      ref.kill();
      return 18;
    } catch (const std::system_error& e) {
      if (e.code() != percpu::remote_errc::no_fence) return 19;
    }
    ref.get();
    ref.put();
    busy.stop();
    if (!lock.try_lock()) return 20;
    lock.unlock();
    ref.kill();
    return released == 1 ? 0 : 21;
  });
  EXPECT_EQ(status, 0);
}

// A cgroup holding CPU 0 only, made for the test (root and a writable cpuset controller).
class cpuset_of_cpu0 {
 public:
  cpuset_of_cpu0() {
    const std::string v1 = "/sys/fs/cgroup/cpuset";
    const std::string name = "/percpu-test-" + std::to_string(getpid());
    struct stat st {};
    if (stat((v1 + "/cpuset.cpus").c_str(), &st) == 0) {
      dir_ = v1 + name;
      procs_ = dir_ + "/tasks";
    } else if (stat("/sys/fs/cgroup/cgroup.controllers", &st) == 0) {
      std::ofstream("/sys/fs/cgroup/cgroup.subtree_control") << "+cpuset";
      dir_ = "/sys/fs/cgroup" + name;
      procs_ = dir_ + "/cgroup.procs";
    } else {
      why_ = "no cgroup file system";
      return;
    }
    if (mkdir(dir_.c_str(), 0755) != 0) {
      why_ = "cannot make " + dir_ + ": " + std::strerror(errno);
      dir_.clear();
      return;
    }
    for (const char* f : {"/cpuset.mems", "/cpuset.cpus"}) {
      std::ofstream out(dir_ + f);
      out << "0\n";
      out.flush();
      if (!out) why_ = std::string("cannot write ") + dir_ + f;
    }
  }
  ~cpuset_of_cpu0() {
    if (!dir_.empty()) rmdir(dir_.c_str());
  }
  /// Empty when the cgroup is ready.
  const std::string& why_not() const { return why_; }
  const std::string& procs() const { return procs_; }

 private:
  std::string dir_, procs_, why_;
};

// Membarrier denied, the process in a cpuset holding CPU 0
// only. Drains of CPU 1 ended the stress in std::terminate; they are fenced by observation
// now (no thread can run there), and nothing is lost.
TEST(RemoteDrain, StressInACpusetOfOneCpuWithoutMembarrier) {
  if (second_cpu() < 1) GTEST_SKIP() << "needs a second CPU";
  cpuset_of_cpu0 cg;
  if (!cg.why_not().empty()) GTEST_SKIP() << cg.why_not();
  const std::string cli = PERCPU_CLI_PATH;
  const std::string cmd = "echo $$ > " + cg.procs() + " && exec " + cli +
                          " deny-rseq --deny membarrier -- " + cli +
                          " stress --short --reps 3000 2>&1";
  const auto r = percpu::test::shell(cmd);
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_TRUE(contains(r.out, "on 1 CPUs")) << r.out;
  EXPECT_TRUE(contains(r.out, "22 runs, 0 failed")) << r.out;
}

}  // namespace
