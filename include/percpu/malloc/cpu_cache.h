// percpu malloc's front end: a per-CPU cache of free objects for every size class, indexed by
// mm_cid when the kernel provides it (so caches follow the threads that run) and by cpu_id
// otherwise. Each (index, class) is a bounded stack pushed and popped with one rseq critical
// section (no atomic instruction), and moved in bulk with one compare_memcpy_store.
//
// The caches live in one mapping of the index space x the classes' stacks, made at first use;
// untouched stacks cost no resident memory.
#pragma once

#include <cstddef>
#include <cstdint>

#include "percpu/malloc/size_classes.h"

namespace percpu::malloc_impl {

/// Entries of class `cls`'s stack on each index: two transfer batches.
constexpr std::size_t cache_capacity(std::size_t cls) {
  return cls == 0 ? 0 : 2 * std::size_t{kClasses[cls].batch};
}

/// Makes the caches ready (maps them, and lets the percpu runtime initialize). Returns false
/// when they cannot be used now: out of memory, the runtime's initialization or a switch to
/// fallback mode under way (both allocate, maybe further up this thread's stack); callers then
/// use the central lists. The first call may allocate: call it only where malloc may recurse.
bool cache_init() noexcept;

/// Pops a cached object of `cls` on the calling thread's index; nullptr when that stack is
/// empty. Precondition: cache_init() returned true. Async-signal-safe.
void* cache_pop(std::size_t cls) noexcept;

/// Pushes `p` onto the calling thread's stack of `cls`; false when it is full.
bool cache_push(std::size_t cls, void* p) noexcept;

/// Moves up to `n` entries off the calling thread's stack of `cls` into `out`; returns how many.
std::size_t cache_pop_many(std::size_t cls, void** out, std::size_t n) noexcept;

/// Pushes as many of the `n` entries at `in` as fit; returns how many (in[0, result)).
std::size_t cache_push_many(std::size_t cls, void* const* in, std::size_t n) noexcept;

/// Objects cached for `cls` over all indices (reads every index's count: for statistics).
std::size_t cache_count(std::size_t cls) noexcept;

}  // namespace percpu::malloc_impl
