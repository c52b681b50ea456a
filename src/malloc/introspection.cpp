// percpu malloc's figures in glibc's terms, and malloc_trim()'s trim (see introspection.h).
#include "percpu/malloc/introspection.h"

#include "percpu/malloc/central.h"
#include "percpu/malloc/cpu_cache.h"
#include "percpu/malloc/page_heap.h"
#include "percpu/malloc/stats.h"

#include <pthread.h>

namespace percpu::malloc_impl {

heap_figures figures() noexcept {
  static malloc_stats s;  // large (one entry per class): not on the stack of a small thread
  static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
  pthread_mutex_lock(&lock);
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
  pthread_mutex_unlock(&lock);
  return f;
}

std::size_t trim() noexcept {
  for (int i = 0; i < cache_indices(); ++i) cache_drain(i);
  // Each call returns half of a class's transfer batches: repeat until none is left.
  for (std::size_t cls = 1; cls < kClassCount; ++cls)
    while (central_release_transfer(cls) != 0) {
    }
  return page_heap().release(0);
}

}  // namespace percpu::malloc_impl
