// percpu malloc's figures in glibc's terms, and malloc_trim()'s trim (see introspection.h).
#include "malloc/introspection.h"

#include "malloc/central.h"
#include "malloc/cpu_cache.h"
#include "malloc/page_heap.h"
#include "malloc/stats.h"

#include <pthread.h>

#include "cancel_disabled.h"

namespace percpu::malloc_impl {

namespace {

// One collector at a time (the stats below are shared); held across fork() (allocator.cpp).
pthread_mutex_t g_figures_lock = PTHREAD_MUTEX_INITIALIZER;

}  // namespace

void figures_lock_for_fork() noexcept {
  pthread_mutex_lock(&g_figures_lock);
}

void figures_unlock_after_fork() noexcept {
  pthread_mutex_unlock(&g_figures_lock);
}

heap_figures figures() noexcept {
  static malloc_stats s;  // large (one entry per class): not on the stack of a small thread
  // collect_stats() reads /proc (open and read are cancellation points): a thread cancelled
  // there would unwind out of this noexcept function (std::terminate) holding the lock.
  percpu::detail::cancel_disabled no_cancel;
  pthread_mutex_lock(&g_figures_lock);
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
  pthread_mutex_unlock(&g_figures_lock);
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
