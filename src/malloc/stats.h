// percpu malloc's statistics: what each layer holds, per size class and in bytes, and the
// process's RSS. Collected on demand; printing needs no allocation (safe at exit).
#pragma once

#include <cstddef>

#include "malloc/page_heap.h"
#include "malloc/size_classes.h"

namespace percpu::malloc_impl {

/// One size class.
struct class_stats {
  std::size_t size = 0;              ///< object bytes
  std::size_t spans = 0;             ///< spans carved into this class
  std::size_t free_in_spans = 0;     ///< free objects in them (never handed out included)
  std::size_t transfer_objects = 0;  ///< objects in the transfer cache
  std::size_t cached_objects = 0;    ///< objects in the per-CPU caches, all indices
  std::size_t refills = 0;           ///< per-CPU cache misses refilled from the middle end
  std::size_t flushes = 0;           ///< full per-CPU caches flushed to the middle end
  std::size_t capacity = 0;          ///< current per-CPU capacities, all indices (objects)
};

/// Everything, in bytes unless named otherwise.
struct malloc_stats {
  page_heap_stats heap;       ///< the page heap's layers (see page_heap.h)
  std::size_t rss_bytes = 0;  ///< the process's resident set (/proc/self/statm), 0 if unknown
  class_stats classes[kClassCount];  ///< index 0 unused (large allocations are in heap.large)
  std::size_t cache_indices = 0;     ///< per-CPU cache indices (mm_cid or CPU numbers)
  std::size_t cache_budget = 0;      ///< byte budget of one index's caches
  std::size_t cache_committed = 0;   ///< bytes committed by all indices' capacities
  std::size_t drains = 0;            ///< idle indices drained by maintenance
  std::size_t trimmed = 0;           ///< objects moved from above lowered capacities
  std::size_t leaked_frees = 0;      ///< frees in signal handlers that could not be completed
};

/// Counts a refill of class `cls` by a thread outside the per-CPU caches (the caches count
/// their own refills: cache_note_miss).
void count_refill_outside(std::size_t cls) noexcept;
/// Counts a flush of class `cls` (on the calling thread's cache index, else globally).
void count_flush(std::size_t cls) noexcept;
/// Counts a free a signal handler could not complete nor defer (reentrancy.h): its object stays
/// allocated.
void count_leaked_free() noexcept;

/// Collects the statistics (takes each used class's locks in turn, and the page heap's).
void collect_stats(malloc_stats& out) noexcept;

/// Writes the statistics as text to file descriptor `fd`: a summary of the layers, then a line
/// per size class in use. Allocates nothing. Not a cancellation point (cancellation is
/// disabled while it runs).
void print_stats(int fd) noexcept;

/// fork(): print_stats()'s lock, held across it by percpu malloc's fork handlers
/// (allocator.cpp), first of its locks.
void stats_lock_for_fork() noexcept;
void stats_unlock_after_fork() noexcept;

}  // namespace percpu::malloc_impl
