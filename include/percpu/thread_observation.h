// Fencing by observation: where the calling thread cannot run on a CPU (a cpuset, an offline
// CPU) and membarrier's RSEQ fence is unavailable, the threads of the process are looked at
// instead. Internal to percpu (remote.cpp, the switch to fallback mode).
#pragma once

#include <vector>

#include "percpu/config.h"

namespace percpu::detail {

/// Waits until every other thread of the process has been seen, after the call began, not
/// running on any CPU in `cpus` (ids; /proc/self/task/TID/stat: a thread whose state is not
/// 'R', or whose CPU is another, or that has exited). A critical section can commit only by
/// running on its CPU without a break from its start to its commit; a thread seen elsewhere
/// or not running has had that break, so a section it began there before the call aborts.
/// Threads created during the call began no section before it. Returns true once every thread
/// was seen so, false when one still looked to be running on such a CPU after `limit_ms`
/// milliseconds, or when /proc/self/task cannot be read. Not async-signal-safe (allocates).
PERCPU_API bool no_thread_runs_on(const std::vector<int>& cpus, int limit_ms);

}  // namespace percpu::detail
