#include "percpu/thread_observation.h"

#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace percpu::detail {
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
  p += 2;                               // on the state
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

}  // namespace percpu::detail
