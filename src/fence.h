// The fences, private to the library: each way of making sure that no rseq critical section
// that began on a CPU before the call can still commit after it, and the order in which
// fence_cpus() tries them (fence.cpp). membarrier_rseq_fence() itself is public
// (percpu/membarrier.h).
#pragma once

#include <vector>

namespace percpu::detail {

/// Fences `cpu` (a cpu_id), or every cpu_id when `cpu` is -1: membarrier's RSEQ fence; where
/// it is unavailable, a migration sweep over the CPU(s); for the CPUs the sweep could not run
/// on, observation of the threads for up to `observation_limit_ms` milliseconds. Returns the
/// CPUs left unfenced: empty on success, else those where a thread of the process still looked
/// to be running. Changes the calling thread's affinity and puts it back, and reads /proc
/// (cancellation points: callers disable cancellation). Not async-signal-safe (allocates).
std::vector<int> fence_cpus(int cpu, int observation_limit_ms);

/// Runs the calling thread once on each CPU of `cpus` (ids) that the kernel lets it run on,
/// then restores its affinity: any thread that was inside a critical section on one of those
/// CPUs has been preempted and will abort. The fence of last resort where membarrier is
/// unavailable. Returns the CPUs it could not run on (offline, outside the cpuset), for
/// no_thread_runs_on().
std::vector<int> migration_sweep(const std::vector<int>& cpus);

/// Every id of the cpu_id index space, 0 to machine_topology().cpu_id_bound - 1: what a full
/// migration sweep visits (sysfs may list fewer CPUs than the kernel runs threads on).
std::vector<int> every_cpu_id();

/// Waits until every other thread of the process has been seen, after the call began, not
/// running on any CPU in `cpus` (ids; /proc/self/task/TID/stat: a thread whose state is not
/// 'R', or whose CPU is another, or that has exited). A critical section can commit only by
/// running on its CPU without a break from its start to its commit; a thread seen elsewhere
/// or not running has had that break, so a section it began there before the call aborts.
/// Threads created during the call began no section before it. Returns true once every thread
/// was seen so, false when one still looked to be running on such a CPU after `limit_ms`
/// milliseconds, or when /proc/self/task cannot be read. Not async-signal-safe (allocates).
bool no_thread_runs_on(const std::vector<int>& cpus, int limit_ms);

}  // namespace percpu::detail
