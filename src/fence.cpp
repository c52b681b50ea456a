// The fences: how percpu makes sure that no rseq critical section that began on a CPU before
// the call can commit after it (fence_index(), the switch to fallback mode). Three ways, tried
// in this order by fence_cpus(): membarrier's RSEQ fence; running the calling thread on each
// CPU (a migration sweep: whatever ran there was preempted, and a preempted section aborts);
// and, for CPUs this thread may not run on, observing the process's threads until none is seen
// running there.
#include "fence.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/membarrier.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "percpu/membarrier.h"
#include "percpu/topology.h"

// --- membarrier's RSEQ fence (Linux 5.10) ----------------------------------------------------
namespace percpu {
namespace {

long sys_membarrier(int cmd, unsigned flags, int cpu) {
  return syscall(SYS_membarrier, cmd, flags, cpu);
}

// 0: not yet registered, 1: registered, -errno: unavailable.
std::atomic<int> g_registration{0};

int register_once() {
  int state = g_registration.load(std::memory_order_acquire);
  if (state != 0) return state;
  const long r = sys_membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_RSEQ, 0, 0);
  state = r == 0 ? 1 : -errno;
  g_registration.store(state, std::memory_order_release);
  return state;
}

}  // namespace

int membarrier_rseq_fence(int cpu) noexcept {
  const int state = register_once();
  if (state < 0) return -state;
  const unsigned flags = cpu >= 0 ? MEMBARRIER_CMD_FLAG_CPU : 0;
  long r = sys_membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED_RSEQ, flags, cpu < 0 ? 0 : cpu);
  if (r != 0 && errno == EPERM) {
    // A forked child does not inherit the registration: register again and retry once.
    if (sys_membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_RSEQ, 0, 0) == 0)
      r = sys_membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED_RSEQ, flags, cpu < 0 ? 0 : cpu);
  }
  return r == 0 ? 0 : errno;
}

bool membarrier_rseq_available() noexcept {
  return register_once() > 0;
}

}  // namespace percpu

namespace percpu::detail {

// --- running on the CPU -------------------------------------------------------------------
// Running on a CPU means whatever ran there before was preempted, and a preempted section aborts.
std::vector<int> migration_sweep(const std::vector<int>& cpus) {
  const topology& t = machine_topology();
  const int bits = std::max({t.cpu_id_bound, t.kernel_cpu_limit, int{CPU_SETSIZE}});
  const std::size_t bytes = CPU_ALLOC_SIZE(bits);
  std::vector<int> missed;
  missed.reserve(cpus.size());  // the only allocation, before the affinity changes
  // The thread's own affinity is put back on every exit (and the sets freed).
  struct affinity_restorer {
    std::size_t bytes;
    cpu_set_t* saved;
    cpu_set_t* one;
    bool restorable = false;
    ~affinity_restorer() {
      if (restorable) sched_setaffinity(0, bytes, saved);
      CPU_FREE(saved);
      CPU_FREE(one);
    }
  } guard{bytes, CPU_ALLOC(bits), CPU_ALLOC(bits)};
  cpu_set_t* const one = guard.one;
  const bool restorable =
      guard.saved != nullptr && one != nullptr && sched_getaffinity(0, bytes, guard.saved) == 0;
  guard.restorable = restorable;
  for (int cpu : cpus) {
    bool visited = false;
    if (restorable && cpu >= 0 && cpu < bits) {
      CPU_ZERO_S(bytes, one);
      CPU_SET_S(cpu, bytes, one);
      visited = sched_setaffinity(0, bytes, one) == 0;
      if (visited) sched_yield();
    }
    if (!visited) missed.push_back(cpu);
  }
  return missed;
}

std::vector<int> every_cpu_id() {
  std::vector<int> ids(static_cast<std::size_t>(machine_topology().cpu_id_bound));
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int>(i);
  return ids;
}

// --- observing the threads ----------------------------------------------------------------
namespace {

enum class seen { away, maybe_on, gone };

// Field 39 of /proc/PID/stat (processor) follows the 36th space after the state (field 3);
// the command name before them, in parentheses, may hold spaces and parentheses, so parsing
// starts after the last ')'.
constexpr int kProcessorAfterState = 36;

seen observe(long tid, const std::vector<int>& cpus) {
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/self/task/%ld/stat", tid);
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno == ENOENT || errno == ESRCH ? seen::gone : seen::maybe_on;
  char text[1024];
  const ssize_t n = read(fd, text, sizeof(text) - 1);
  close(fd);
  if (n <= 0) return n == 0 || errno == ESRCH ? seen::gone : seen::maybe_on;
  text[n] = '\0';
  const char* p = std::strrchr(text, ')');
  if (p == nullptr || p[1] != ' ') return seen::maybe_on;
  const char state = p[2];
  // Not running: it left its CPU since any section began. (Strictly, a thread that set a sleep
  // state and found its condition met returns without switching out; inside a section that
  // needs a page fault that sleeps, within a few instructions of our read. Counting its
  // context switches, /proc/TID/status, would close that window; see the README's limits.)
  if (state != 'R') return seen::away;
  p += 2;  // on the state
  for (int space = 0; space < kProcessorAfterState; ++space) {
    p = std::strchr(p + 1, ' ');
    if (p == nullptr) return seen::maybe_on;
  }
  const int cpu = std::atoi(p + 1);
  return std::find(cpus.begin(), cpus.end(), cpu) == cpus.end() ? seen::away : seen::maybe_on;
}

bool list_threads(std::vector<long>& tids) {
  DIR* dir = opendir("/proc/self/task");
  if (dir == nullptr) return false;
  const long self = gettid();
  while (const dirent* e = readdir(dir)) {
    char* end = nullptr;
    const long tid = std::strtol(e->d_name, &end, 10);
    if (end != e->d_name && *end == '\0' && tid != self) tids.push_back(tid);
  }
  closedir(dir);
  return true;
}

}  // namespace

bool no_thread_runs_on(const std::vector<int>& cpus, int limit_ms) {
  std::vector<long> pending;
  if (!list_threads(pending)) return false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(limit_ms);
  for (;;) {
    pending.erase(std::remove_if(pending.begin(), pending.end(),
                                 [&](long tid) { return observe(tid, cpus) != seen::maybe_on; }),
                  pending.end());
    if (pending.empty()) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    sched_yield();
  }
}

// --- the three, in order ------------------------------------------------------------------
std::vector<int> fence_cpus(int cpu, int observation_limit_ms) {
  if (membarrier_rseq_fence(cpu) == 0) return {};
  // Without membarrier: run on the CPU (on every cpu_id for -1). Where the kernel refuses (the
  // CPU is offline, or outside this thread's cpuset), look at the threads instead: an offline
  // CPU runs none, and a cpuset that holds every thread keeps them all off the CPU, so that
  // proof comes at once.
  std::vector<int> missed = migration_sweep(cpu >= 0 ? std::vector<int>{cpu} : every_cpu_id());
  if (missed.empty() || no_thread_runs_on(missed, observation_limit_ms)) return {};
  return missed;
}

}  // namespace percpu::detail
