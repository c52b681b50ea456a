// percpu malloc's figures in glibc's terms, and malloc_trim()'s trim (see introspection.h).
#include "malloc/introspection.h"

#include "malloc/central.h"
#include "malloc/cpu_cache.h"
#include "malloc/page_heap.h"
#include "malloc/stats.h"

#include "cancel_disabled.h"
#include "malloc/fork_fair_mutex.h"

namespace percpu::malloc_impl {

namespace {

// One collector at a time (the stats below are shared); held across fork() (allocator.cpp),
// which a thread collecting in a loop must not keep out (fork_fair_mutex.h).
constinit fork_fair_mutex g_figures_lock;

}  // namespace

void figures_lock_for_fork() noexcept {
  g_figures_lock.lock_for_fork();
}

void figures_unlock_after_fork() noexcept {
  g_figures_lock.unlock_after_fork();
}

heap_figures figures() noexcept {
  static malloc_stats s;  // large (one entry per class): not on the stack of a small thread
  // collect_stats() reads /proc (open and read are cancellation points): a thread cancelled
  // there would unwind out of this noexcept function (std::terminate) holding the lock.
  percpu::detail::cancel_disabled no_cancel;
  g_figures_lock.lock();
  collect_stats(s);
  heap_figures f;
  f.mapped = s.heap.mapped;
  f.free_backed = s.heap.free;
  f.in_use = s.heap.large;
  for (std::size_t cls = 1; cls < kClassCount; ++cls) {
    const class_stats& k = s.classes[cls];
    const std::size_t objects = k.spans * kClasses[cls].objects_per_span();
    const std::size_t free = k.free_in_spans + k.transfer_objects + k.cached_objects;
    const std::size_t held = objects > free ? objects - free : 0;
    f.in_use += held * k.size;
  }
  g_figures_lock.unlock();
  return f;
}

std::size_t trim() noexcept {
  percpu::detail::cancel_disabled no_cancel;  // drains close slots; noexcept
  for (int i = 0; i < cache_indices(); ++i) cache_drain(i);
  // Each call returns half of a class's transfer batches: repeat until none is left.
  for (std::size_t cls = 1; cls < kClassCount; ++cls)
    while (central_release_transfer(cls) != 0) {
    }
  return page_heap().release(0);
}

}  // namespace percpu::malloc_impl
