// percpu malloc's allocation functions, with malloc's semantics, under percpu names: the
// interposing library (libpercpu_malloc.so, src/malloc/interpose.cpp) maps malloc, free and the
// rest onto these.
//
// Small sizes (up to kMaxSmallSize) come from the per-CPU caches, refilled and flushed in
// batches through the transfer caches and central free lists; larger ones are spans of the page
// heap. Faults (a double free, an interior pointer, a pointer into percpu malloc's memory that
// is not a live block) stop the process with a message naming the fault and the pointer, as
// glibc does: at the call for an interior or foreign pointer and a large block; for a double
// or stray free of a small object, where the object next leaves a cache or its span, before it
// reaches a second user (free_tag.h). A pointer outside percpu malloc's memory (another allocator's
// block, e.g. from a library loaded with RTLD_DEEPBIND that calls libc's malloc) goes to the
// foreign allocator when one is set (set_foreign_allocator), and stops the process otherwise.
#pragma once

#include <cstddef>

namespace percpu::malloc_impl {

/// malloc(3): at least `size` bytes aligned on 16; nullptr with errno ENOMEM when out of memory
/// or for absurd sizes. Size 0 returns a unique minimum-size object.
void* allocate(std::size_t size) noexcept;

/// free(3): returns `p` (null: nothing). Stops the process on a fault (see above).
void deallocate(void* p) noexcept;

/// calloc(3): `count` x `size` zeroed bytes; nullptr with ENOMEM when the product overflows.
void* allocate_zeroed(std::size_t count, std::size_t size) noexcept;

/// realloc(3): grows or shrinks `p` to `size` bytes, keeping the contents up to the smaller
/// size; in place when the object already has room and would not waste more than half of it.
/// realloc(p, 0) frees `p` and returns nullptr (glibc's behaviour); on failure `p` is intact.
/// A `p` that is not allocated (freed, or never returned) stops the process at this call.
void* reallocate(void* p, std::size_t size) noexcept;

/// memalign(3)/aligned_alloc(3): `size` bytes aligned on `alignment` (a power of two; smaller
/// ones than 16, and 0, mean 16; size 0 gives a unique minimum-size object). nullptr with EINVAL
/// for an alignment that is not a power of two, ENOMEM for one above 1 GiB (kMaxLargeAlignment),
/// ENOMEM when out of memory.
void* allocate_aligned(std::size_t alignment, std::size_t size) noexcept;

/// malloc_usable_size(3): the bytes usable at `p` (0 for null). Stops the process for a
/// pointer percpu malloc did not return.
std::size_t usable_size(const void* p) noexcept;

/// The allocator that serves pointers outside percpu malloc's memory (not in its pagemap): the
/// next one in the symbol lookup order, libc's or another preloaded allocator's.
struct foreign_allocator {
  void (*free)(void*) = nullptr;
  void* (*realloc)(void*, std::size_t) = nullptr;
  std::size_t (*usable_size)(void*) = nullptr;
};

/// Sets the foreign allocator (the interposing library does, at load, from dlsym(RTLD_NEXT)).
/// Its functions must be all set or all null.
void set_foreign_allocator(const foreign_allocator& next) noexcept;

}  // namespace percpu::malloc_impl
