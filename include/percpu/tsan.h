// ThreadSanitizer annotations: the happens-before edges the critical sections give, told to
// TSan. A section's loads and stores are inline asm, which TSan does not see, so an object handed
// from one thread to another through a structure (a push, then a pop or a drain) looks to it
// like two unsynchronized accesses. Compiled in only under -fsanitize=thread; elsewhere every
// call below is an empty inline function and costs nothing.
#pragma once

#define PERCPU_PUBLIC_HEADER 1  // lets it include percpu/internal/

#include "percpu/internal/config.h"  // first: the C++20 check

#include <cstddef>
#include <cstdint>

/// PERCPU_TSAN is 1 when this translation unit is compiled with -fsanitize=thread (clang:
/// __has_feature(thread_sanitizer); gcc: __SANITIZE_THREAD__), else 0. Under it the structures
/// annotate their hand-offs with __tsan_acquire()/__tsan_release() from
/// <sanitizer/tsan_interface.h> (the TSan runtime's interface).
#if defined(__SANITIZE_THREAD__)
#define PERCPU_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define PERCPU_TSAN 1
#endif
#endif
#ifndef PERCPU_TSAN
#define PERCPU_TSAN 0
#endif

#if PERCPU_TSAN
#include <sanitizer/tsan_interface.h>
#endif

namespace percpu::detail {

/// Under TSan: records that everything the calling thread did so far happens before whatever a
/// thread does after a later tsan_acquire(key) (__tsan_release). Called just before the commit
/// that hands an object over. `key` must be an address in the program's memory (an object,
/// the structure): TSan keeps the edge in the metadata of that address. Empty otherwise.
PERCPU_ALWAYS_INLINE void tsan_release([[maybe_unused]] const void* key) noexcept {
#if PERCPU_TSAN
  __tsan_release(const_cast<void*>(key));
#endif
}

/// Under TSan: the calling thread now happens after every tsan_release(key) before it
/// (__tsan_acquire). Called after a committed pop or drain. Empty otherwise.
PERCPU_ALWAYS_INLINE void tsan_acquire([[maybe_unused]] const void* key) noexcept {
#if PERCPU_TSAN
  __tsan_acquire(const_cast<void*>(key));
#endif
}

/// tsan_release() of each of the `n` values at `values`, read as addresses (the pointers a
/// bulk push hands over). Empty, without reading them, otherwise.
PERCPU_ALWAYS_INLINE void tsan_release_each([[maybe_unused]] const std::intptr_t* values,
                                            [[maybe_unused]] std::size_t n) noexcept {
#if PERCPU_TSAN
  for (std::size_t i = 0; i < n; ++i) tsan_release(reinterpret_cast<const void*>(values[i]));
#endif
}

/// tsan_acquire() of each of the `n` values at `values` (the pointers a bulk pop or a drain
/// took). Empty otherwise.
PERCPU_ALWAYS_INLINE void tsan_acquire_each([[maybe_unused]] const std::intptr_t* values,
                                            [[maybe_unused]] std::size_t n) noexcept {
#if PERCPU_TSAN
  for (std::size_t i = 0; i < n; ++i) tsan_acquire(reinterpret_cast<const void*>(values[i]));
#endif
}

}  // namespace percpu::detail
