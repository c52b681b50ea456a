// What glibc's malloc introspection calls (mallinfo2, malloc_stats, malloc_info, malloc_trim)
// report, computed from percpu malloc's own layers, and the trim they can ask for.
#pragma once

#include <cstddef>

namespace percpu::malloc_impl {

/// The heap in glibc's terms, in bytes.
struct heap_figures {
  std::size_t mapped = 0;       ///< regions mapped for spans (glibc: the arena's system bytes)
  std::size_t in_use = 0;       ///< held by users: small objects (at their class size) and large
                                ///< blocks (whole pages)
  std::size_t free_backed = 0;  ///< free spans still resident (what a trim can return)
};

/// Collects the figures (takes each class's lock in turn, and the page heap's). Allocates
/// nothing. Not a cancellation point: cancellation is disabled while it runs (it reads
/// /proc/self/statm under its lock).
heap_figures figures() noexcept;

/// fork(): figures()'s lock, held across it by percpu malloc's fork handlers (allocator.cpp),
/// so that a child of a process forked while another thread collected figures can collect them.
void figures_lock_for_fork() noexcept;
void figures_unlock_after_fork() noexcept;

/// Gives everything cached back: drains every index's per-CPU caches, empties the transfer
/// caches, and returns every free span's memory to the kernel (madvise). Returns the bytes
/// returned to the kernel. What malloc_trim() does. Cancellation is disabled while it runs.
std::size_t trim() noexcept;

}  // namespace percpu::malloc_impl
