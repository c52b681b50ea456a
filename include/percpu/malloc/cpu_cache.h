// percpu malloc's front end: a per-CPU cache of free objects for every size class, indexed by
// mm_cid when the kernel provides it (so caches follow the threads that run) and by cpu_id
// otherwise. Each (index, class) is a bounded stack pushed and popped with one rseq critical
// section (no atomic instruction), and moved in bulk with one compare_memcpy_store.
//
// The caches live in one mapping of the index space x the classes' stacks, made at first use;
// untouched stacks cost no resident memory.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>

#include "percpu/abi.h"
#include "percpu/malloc/size_classes.h"
#include "percpu/runtime.h"
#if defined(__x86_64__)
#include "percpu/arch/x86_64/current_stack.h"
#endif

namespace percpu::malloc_impl {

/// Entries of class `cls`'s stack on each index: two transfer batches.
constexpr std::size_t cache_capacity(std::size_t cls) {
  return cls == 0 ? 0 : 2 * std::size_t{kClasses[cls].batch};
}

namespace cache_layout {

/// Word offset of each class's stack (count, then entries) inside an index's region.
constexpr std::array<std::size_t, kClassCount + 1> make_offsets() {
  std::array<std::size_t, kClassCount + 1> o{};
  for (std::size_t c = 1; c < kClassCount; ++c) o[c + 1] = o[c] + 1 + cache_capacity(c);
  return o;
}
inline constexpr auto kOffsets = make_offsets();
/// An index's region, rounded up to whole cache lines.
inline constexpr std::size_t kRegionWords = (kOffsets[kClassCount] + 7) / 8 * 8;
inline constexpr std::size_t kRegionBytes = kRegionWords * sizeof(std::intptr_t);

/// The regions of all indices (index i's at i * kRegionWords); null until cache_init().
extern std::atomic<std::intptr_t*> g_regions;
/// g_regions again, for the fast paths: published only when the process has an rseq area,
/// after the two offsets below.
extern std::atomic<std::intptr_t*> g_fast_regions;
/// The rseq area's offset from the thread pointer, and the index field's (mm_cid where the
/// kernel provides it, else cpu_id): set before g_fast_regions is published, fixed afterwards.
extern std::intptr_t g_area_offset;
extern std::intptr_t g_index_offset;

}  // namespace cache_layout

/// The fast path of cache_pop(): one critical section that reads the index itself. Returns
/// nullptr whenever it cannot serve (caches not made yet or made in fallback mode, fallback mode,
/// this thread's area not registered yet, an empty or drained stack, repeated aborts); the caller
/// then takes the slow path, which handles every one of those.
__attribute__((always_inline)) inline void* cache_pop_fast(std::size_t cls) noexcept {
#if defined(__x86_64__)
  std::intptr_t* regions = cache_layout::g_fast_regions.load(std::memory_order_acquire);
  if (regions != nullptr) {
    std::intptr_t* first = regions + cache_layout::kOffsets[cls];
    std::intptr_t v = 0;
    // One attempt: after an abort (rare) the slow path retries, keeping this path short enough
    // to need no stack frame.
    if (arch::current_stack_pop<cache_layout::kRegionBytes>(cache_layout::g_area_offset,
                                                            cache_layout::g_index_offset, first,
                                                            v) == arch::stack_result::done)
      return reinterpret_cast<void*>(v);
  }
#endif
  (void)cls;
  return nullptr;
}

/// The fast path of cache_push(): false whenever it cannot push (as cache_pop_fast(), or a
/// full stack); the caller then takes the slow path.
__attribute__((always_inline)) inline bool cache_push_fast(std::size_t cls, void* p) noexcept {
#if defined(__x86_64__)
  std::intptr_t* regions = cache_layout::g_fast_regions.load(std::memory_order_acquire);
  if (regions != nullptr) {
    std::intptr_t* first = regions + cache_layout::kOffsets[cls];
    const auto v = reinterpret_cast<std::intptr_t>(p);
    return arch::current_stack_push<cache_layout::kRegionBytes>(
               cache_layout::g_area_offset, cache_layout::g_index_offset, first,
               cache_capacity(cls), v) == arch::stack_result::done;
  }
#endif
  (void)cls;
  (void)p;
  return false;
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

/// Drains index `index`'s caches: every class's stack is closed, fenced (membarrier RSEQ, as
/// percpu's remote operations), emptied into the central lists and reopened. For caches of
/// threads that no longer run there (an mm_cid no thread holds now, a CPU gone idle). Returns
/// the objects moved; 0 for an index outside the index space, before cache_init(), or when no
/// fence is available (nothing is moved then). Allocates nothing, except an exception object
/// when a fence fails. Not async-signal-safe.
std::size_t cache_drain(int index) noexcept;

/// The index space of the caches (0 before cache_init()).
int cache_indices() noexcept;

/// A fingerprint of index `index`'s stacks: it changes whenever any of their counts does, and
/// is 0 when they are all empty. Pages never touched are not read (they hold empty stacks).
std::uint64_t cache_fingerprint(int index) noexcept;

/// Objects cached for `cls` over all indices (reads every index's count: for statistics).
std::size_t cache_count(std::size_t cls) noexcept;

}  // namespace percpu::malloc_impl
