// Test helpers for remote drains that cannot fence: a second CPU to drain, and a thread cut off
// from both fences (membarrier and running on the CPU), as in a cpuset with membarrier denied.
#pragma once

#include <seccomp.h>

#include <cerrno>

#include <percpu/topology.h>

namespace percpu::test {

/// The highest CPU this process may run on, or -1 when it has only one.
inline int second_cpu() {
  const auto& allowed = percpu::machine_topology().allowed_cpus;
  return allowed.size() >= 2 ? allowed.back() : -1;
}

/// Denies membarrier (ENOSYS) and sched_setaffinity (EINVAL) to the calling thread only (no
/// TSYNC): that thread can neither fence with membarrier nor run on another CPU, as in a cpuset,
/// while the process's other threads keep running where they are. Its fences then work by
/// observing the other threads (/proc/self/task/*/stat). False when seccomp refused.
inline bool cut_off_this_thread() {
  scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
  if (ctx == nullptr) return false;
  int rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(membarrier), 0);
  if (rc == 0) rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EINVAL), SCMP_SYS(sched_setaffinity), 0);
  if (rc == 0) rc = seccomp_load(ctx);
  seccomp_release(ctx);
  return rc == 0;
}

}  // namespace percpu::test
