// percpu malloc's periodic upkeep, so that RSS follows use instead of staying at its high-water
// mark: caches of indices that went idle are drained back (remote drain, cpu_cache.h), classes
// without misses on the others give capacity back (cache_shrink_unused), and free
// page-heap memory not reused for kDecayNs is returned to the kernel (madvise; the page heap
// itself keeps backed free memory within its bound at every free of a small span, page_heap.h).
// There is no background thread by default: the allocator's slow paths (refills and flushes) call
// maybe_maintain(), and one of them does a pass at most every kMaintenanceInterval; transfer
// caches lose half their batches to their spans at each pass. A process that stops allocating
// keeps what its caches hold, and free memory within the page heap's bound, until its next slow
// path, unless PERCPU_MALLOC_BACKGROUND=1 starts a
// background thread (named percpu-malloc, at the first pass that moved or returned memory,
// again after fork()) that runs the passes itself. It is not the default: a thread of its own
// makes the program multi-threaded, and unshare(CLONE_NEWUSER) fails with EINVAL in a
// multi-threaded process (jemalloc's background thread has the same effect).
#pragma once

#include <cstddef>
#include <cstdint>

namespace percpu::malloc_impl {

/// Shortest time between two passes, in ns.
inline constexpr std::int64_t kMaintenanceInterval = 100'000'000;

/// What maintenance has done since the process started.
struct maintenance_stats {
  std::uint64_t passes = 0;
  std::uint64_t drains = 0;  ///< idle indices drained
  std::uint64_t drained_objects = 0;
  std::uint64_t trimmed_objects = 0;            ///< moved from above lowered capacities
  std::uint64_t transfer_objects_released = 0;  ///< moved from transfer caches to spans
  std::uint64_t released_bytes = 0;             ///< free memory returned to the kernel
};

/// Runs a pass when kMaintenanceInterval has passed since the last one and no other thread is
/// running one; returns at once otherwise (a clock read and a load). Call only from slow paths
/// that may take locks and make system calls (not from a signal handler).
void maybe_maintain() noexcept;

/// Runs a pass now (waits for one in progress). An index is idle when none of its stacks'
/// counts changed since the previous pass: the first pass only takes a snapshot. A pass is not
/// a cancellation point (cancellation is disabled while it runs), here and in maybe_maintain().
void maintain() noexcept;

/// fork(): the pass lock, held across it by percpu malloc's fork handlers (allocator.cpp),
/// after the introspection locks and before the central lists' (a pass takes those under it).
void maintenance_lock_for_fork() noexcept;
void maintenance_unlock_after_fork() noexcept;
/// The same in a forked child, which has no background thread: the next slow path starts one.
void maintenance_unlock_in_child() noexcept;

/// What the passes have done since the process started (takes the pass lock: waits for a pass
/// in progress).
maintenance_stats maintenance_stats_now() noexcept;

}  // namespace percpu::malloc_impl
