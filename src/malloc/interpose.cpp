// libpercpu_malloc.so: the C allocation API and every C++ operator new/delete form, mapped onto
// percpu malloc's functions (allocator.h). Use it with LD_PRELOAD, or link it before libc.
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <new>

#include "malloc/allocator.h"
#include "malloc/env_parse.h"
#include "malloc/fast_path.h"
#include "malloc/stats.h"
#include "percpu/malloc.h"
#include "percpu/runtime.h"

namespace pm = percpu::malloc_impl;

#define PERCPU_EXPORT extern "C" __attribute__((visibility("default")))

// malloc and free, and operator new and delete below, inline the fast paths (fast_path.h): one
// function each, no jump to another.
PERCPU_EXPORT void* malloc(std::size_t size) noexcept {
  return pm::allocate_inline(size);
}

PERCPU_EXPORT void free(void* p) noexcept {
  pm::deallocate_inline(p);
}

PERCPU_EXPORT void* calloc(std::size_t count, std::size_t size) noexcept {
  return pm::allocate_zeroed(count, size);
}

PERCPU_EXPORT void* realloc(void* p, std::size_t size) noexcept {
  return pm::reallocate(p, size);
}

PERCPU_EXPORT void* reallocarray(void* p, std::size_t count, std::size_t size) noexcept {
  std::size_t bytes;
  if (__builtin_mul_overflow(count, size, &bytes)) {
    errno = ENOMEM;
    return nullptr;
  }
  return pm::reallocate(p, bytes);
}

PERCPU_EXPORT int posix_memalign(void** out, std::size_t alignment, std::size_t size) noexcept {
  // POSIX: a power of two and a multiple of sizeof(void*); errors are returned, errno kept.
  if (alignment < sizeof(void*) || (alignment & (alignment - 1)) != 0) return EINVAL;
  const int saved = errno;
  void* p = pm::allocate_aligned(alignment, size);
  if (p == nullptr) {
    const int err = errno;
    errno = saved;
    return err;
  }
  *out = p;
  return 0;
}

PERCPU_EXPORT void* aligned_alloc(std::size_t alignment, std::size_t size) noexcept {
  return pm::allocate_aligned(alignment, size);
}

PERCPU_EXPORT void* memalign(std::size_t alignment, std::size_t size) noexcept {
  // glibc's memalign rounds an alignment that is not a power of two up to the next one (and
  // programs rely on it); aligned_alloc and posix_memalign reject one.
  if (alignment != 0 && (alignment & (alignment - 1)) != 0) {
    if (alignment > (SIZE_MAX >> 1) + 1) {
      errno = ENOMEM;
      return nullptr;
    }
    alignment = std::size_t{1} << (64 - __builtin_clzll(alignment));
  }
  return pm::allocate_aligned(alignment, size);
}

PERCPU_EXPORT void* valloc(std::size_t size) noexcept {
  return pm::allocate_aligned(static_cast<std::size_t>(sysconf(_SC_PAGESIZE)), size);
}

PERCPU_EXPORT void* pvalloc(std::size_t size) noexcept {
  const auto page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  if (size > SIZE_MAX - page) {
    errno = ENOMEM;
    return nullptr;
  }
  return pm::allocate_aligned(page, (size + page - 1) / page * page);
}

PERCPU_EXPORT std::size_t malloc_usable_size(void* p) noexcept {
  return pm::usable_size(p);
}

// Declared in percpu/malloc.h.
PERCPU_EXPORT void percpu_malloc_stats_print(int fd) {
  pm::print_stats(fd);
}

namespace {
// Pointers outside percpu malloc's memory (a library loaded with RTLD_DEEPBIND calls libc's
// malloc, say, and the program frees the block) go to the next allocator in the lookup order.
// The other direction (percpu malloc's block freed by a library bound to libc's free) no
// preloaded allocator can fix: libc's free never asks us.
__attribute__((constructor)) void find_next_allocator() {
  pm::foreign_allocator next;
  next.free = reinterpret_cast<void (*)(void*)>(dlsym(RTLD_NEXT, "free"));
  next.realloc = reinterpret_cast<void* (*)(void*, std::size_t)>(dlsym(RTLD_NEXT, "realloc"));
  next.usable_size =
      reinterpret_cast<std::size_t (*)(void*)>(dlsym(RTLD_NEXT, "malloc_usable_size"));
  if (next.free != nullptr && next.realloc != nullptr && next.usable_size != nullptr)
    pm::set_foreign_allocator(next);
}

// PERCPU_MALLOC_STATS=1 (any non-empty value but 0) prints the statistics to stderr at exit;
// PERCPU_MALLOC_STATS_FILE=path appends them to that file instead (programs such as cat and ls
// close stderr before exit). Neither allocates.
__attribute__((destructor)) void print_stats_at_exit() {
  if (const char* file = pm::env::stats_file(getenv("PERCPU_MALLOC_STATS_FILE"))) {
    const int fd = open(file, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd >= 0) {
      pm::print_stats(fd);
      close(fd);
    } else {
      static const char msg[] = "percpu malloc: cannot open PERCPU_MALLOC_STATS_FILE\n";
      (void)!write(2, msg, sizeof(msg) - 1);
    }
    return;
  }
  if (pm::env::stats_enabled(getenv("PERCPU_MALLOC_STATS"))) pm::print_stats(2);
}
}  // namespace

// ---- C++: operator new throws std::bad_alloc (after the new-handler), nothrow forms return
// null; sized and aligned deletes free like free().

namespace {

// The new-handler loop, after the per-CPU cache's pop did not commit (`aborted`: its section
// aborted, counted here as the slow paths count theirs), or for an alignment above 16.
__attribute__((noinline)) void* new_retry(std::size_t size, std::size_t alignment, bool aborted) {
  if (PERCPU_UNLIKELY(aborted)) percpu::detail::note_abort();  // statistics
  for (;;) {
    void* p = alignment <= 16 ? pm::allocate(size) : pm::allocate_aligned(alignment, size);
    if (p != nullptr) return p;
    std::new_handler handler = std::get_new_handler();
    if (handler == nullptr) throw std::bad_alloc();
    handler();
  }
}

// operator new: the per-CPU cache's pop inline, everything else (refills, large blocks, an
// aborted section, the new-handler loop, alignments above 16) out of line behind one tail call,
// so that the fast path has no stack frame.
__attribute__((always_inline)) inline void* new_or_throw(std::size_t size, std::size_t alignment) {
  if (PERCPU_UNLIKELY(alignment > 16)) return new_retry(size, alignment, false);
  return pm::allocate_cached(size, [size](bool aborted) { return new_retry(size, 16, aborted); });
}

void* new_or_null(std::size_t size, std::size_t alignment) noexcept {
  try {
    return new_or_throw(size, alignment);
  } catch (...) {
    return nullptr;
  }
}

}  // namespace

#define PERCPU_NEW_EXPORT __attribute__((visibility("default")))

PERCPU_NEW_EXPORT void* operator new(std::size_t size) {
  return new_or_throw(size, 16);
}
PERCPU_NEW_EXPORT void* operator new[](std::size_t size) {
  return new_or_throw(size, 16);
}
PERCPU_NEW_EXPORT void* operator new(std::size_t size, const std::nothrow_t&) noexcept {
  return new_or_null(size, 16);
}
PERCPU_NEW_EXPORT void* operator new[](std::size_t size, const std::nothrow_t&) noexcept {
  return new_or_null(size, 16);
}
PERCPU_NEW_EXPORT void* operator new(std::size_t size, std::align_val_t al) {
  return new_or_throw(size, static_cast<std::size_t>(al));
}
PERCPU_NEW_EXPORT void* operator new[](std::size_t size, std::align_val_t al) {
  return new_or_throw(size, static_cast<std::size_t>(al));
}
PERCPU_NEW_EXPORT void* operator new(std::size_t size, std::align_val_t al,
                                     const std::nothrow_t&) noexcept {
  return new_or_null(size, static_cast<std::size_t>(al));
}
PERCPU_NEW_EXPORT void* operator new[](std::size_t size, std::align_val_t al,
                                       const std::nothrow_t&) noexcept {
  return new_or_null(size, static_cast<std::size_t>(al));
}

PERCPU_NEW_EXPORT void operator delete(void* p) noexcept {
  pm::deallocate_inline(p);
}
PERCPU_NEW_EXPORT void operator delete[](void* p) noexcept {
  pm::deallocate_inline(p);
}
PERCPU_NEW_EXPORT void operator delete(void* p, const std::nothrow_t&) noexcept {
  pm::deallocate_inline(p);
}
PERCPU_NEW_EXPORT void operator delete[](void* p, const std::nothrow_t&) noexcept {
  pm::deallocate_inline(p);
}
PERCPU_NEW_EXPORT void operator delete(void* p, std::size_t) noexcept {
  pm::deallocate_inline(p);
}
PERCPU_NEW_EXPORT void operator delete[](void* p, std::size_t) noexcept {
  pm::deallocate_inline(p);
}
PERCPU_NEW_EXPORT void operator delete(void* p, std::align_val_t) noexcept {
  pm::deallocate_inline(p);
}
PERCPU_NEW_EXPORT void operator delete[](void* p, std::align_val_t) noexcept {
  pm::deallocate_inline(p);
}
PERCPU_NEW_EXPORT void operator delete(void* p, std::size_t, std::align_val_t) noexcept {
  pm::deallocate_inline(p);
}
PERCPU_NEW_EXPORT void operator delete[](void* p, std::size_t, std::align_val_t) noexcept {
  pm::deallocate_inline(p);
}
PERCPU_NEW_EXPORT void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept {
  pm::deallocate_inline(p);
}
PERCPU_NEW_EXPORT void operator delete[](void* p, std::align_val_t,
                                         const std::nothrow_t&) noexcept {
  pm::deallocate_inline(p);
}
