// percpu malloc's front end: a per-CPU cache of free objects for every size class, indexed by
// mm_cid when the kernel provides it (so caches follow the threads that run) and by cpu_id
// otherwise. Each (index, class) is a bounded stack pushed and popped with one rseq critical
// section (no atomic instruction), and moved in bulk with one compare_memcpy_store.
//
// Capacities adapt to use under a byte budget per index: each (index, class) stack has room for
// cache_max_capacity() entries, but the fast push stops at the stack's current capacity. A miss
// (a refill of an empty stack, or a push onto a full one) grows the capacity by one transfer
// batch while the index's budget (cache_budget_bytes(), default 3 MiB) allows; the
// maintenance pass shrinks capacities of classes that had no miss since the previous pass and
// trims what lies above them. The budget is a target, not a hard limit: a refill may leave up to
// one batch above a capacity until the next pass.
//
// The caches live in one mapping of the index space x (a header, then the classes' stacks), made
// at first use; untouched stacks cost no resident memory.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>

#include "malloc/size_classes.h"
#include "percpu/abi.h"
#include "percpu/runtime.h"
#if defined(__x86_64__) || defined(__aarch64__)
#include "malloc/current_stack.h"
#endif

namespace percpu::malloc_impl {

/// Classes up to this size (bytes) get deep per-CPU stacks (cache_max_capacity()).
inline constexpr std::size_t kDeepStackMaxClassBytes = 128;

/// Room of class `cls`'s stack on each index, in entries: 32 transfer batches for classes up to
/// kDeepStackMaxClassBytes (4,096 entries of 128-object batches; 2,048, as tcmalloc's per-CPU
/// caches hold of its smallest classes, already let a program that allocates 1,600 small objects
/// and frees them, as glibc's bench-malloc-simple does, stop refilling and flushing the stack in
/// every round), four for the others, and at most 512 KiB of objects (but at least one batch). The
/// index's byte budget bounds what the stacks hold together.
constexpr std::size_t cache_max_capacity(std::size_t cls) {
  if (cls == 0) return 0;
  const std::size_t batch = kClasses[cls].batch;
  const std::size_t by_bytes = (512u << 10) / kClasses[cls].size;
  const std::size_t bound = by_bytes > batch ? by_bytes : batch;
  const std::size_t batches = kClasses[cls].size <= kDeepStackMaxClassBytes ? 32 : 4;
  return batches * batch < bound ? batches * batch : bound;
}

/// Default byte budget of one index's caches (PERCPU_MALLOC_CPU_CACHE_BYTES overrides it).
inline constexpr std::size_t kDefaultCacheBudget = 3u << 20;

namespace cache_layout {

/// An index's region starts with a header of words: each class's current capacity (0: not set
/// yet; the fast push then always declines), its misses (refills), its misses at the last
/// maintenance pass and at the last overflow, its flushes, and the bytes the capacities commit
/// (sum of capacity x size). The counts are added with rseq commits on the index's own lines
/// (no locked instruction, no line shared between CPUs).
inline constexpr std::size_t kCapWord = 0;
inline constexpr std::size_t kMissWord = kClassCount;
inline constexpr std::size_t kSeenMissWord = 2 * kClassCount;
inline constexpr std::size_t kOverflowMissWord = 3 * kClassCount;
inline constexpr std::size_t kFlushWord = 4 * kClassCount;
inline constexpr std::size_t kCommittedWord = 5 * kClassCount;
inline constexpr std::size_t kHeaderWords = (5 * kClassCount + 1 + 7) / 8 * 8;

/// Word offset of each class's stack (count, then entries) inside an index's region.
constexpr std::array<std::size_t, kClassCount + 1> make_offsets() {
  std::array<std::size_t, kClassCount + 1> o{};
  o[1] = kHeaderWords;
  for (std::size_t c = 1; c < kClassCount; ++c) o[c + 1] = o[c] + 1 + cache_max_capacity(c);
  return o;
}
inline constexpr auto kOffsets = make_offsets();
/// Each class's capacity word relative to its stack's count word, in bytes (the fast push's
/// operand, a table load rather than arithmetic on kOffsets).
constexpr std::array<std::intptr_t, kClassCount> make_cap_offsets() {
  std::array<std::intptr_t, kClassCount> o{};
  for (std::size_t c = 1; c < kClassCount; ++c)
    o[c] = (static_cast<std::intptr_t>(kCapWord + c) - static_cast<std::intptr_t>(kOffsets[c])) *
           static_cast<std::intptr_t>(sizeof(std::intptr_t));
  return o;
}
inline constexpr auto kCapOffsets = make_cap_offsets();
/// An index's region, rounded up to whole cache lines.
inline constexpr std::size_t kRegionWords = (kOffsets[kClassCount] + 7) / 8 * 8;
inline constexpr std::size_t kRegionBytes = kRegionWords * sizeof(std::intptr_t);

// Hidden (the library's own): the fast paths load them PC-relative, not through the GOT.
#define PERCPU_MALLOC_HIDDEN __attribute__((visibility("hidden")))

/// The regions of all indices (index i's at i * kRegionWords); null until cache_init().
extern PERCPU_MALLOC_HIDDEN std::atomic<std::intptr_t*> g_regions;
/// Each class's stack in index 0's region (g_regions + kOffsets[cls]), for the fast paths: one
/// load gives the address they index from. Published (with __atomic builtins) only when the
/// process has an rseq area, after the two offsets below; null before, and for class 0.
extern PERCPU_MALLOC_HIDDEN std::intptr_t* g_fast_stacks[kClassCount];
/// The rseq area's offset from the thread pointer, and the index field's (mm_cid where the
/// kernel provides it, else cpu_id): set before g_fast_stacks is published, fixed afterwards.
extern PERCPU_MALLOC_HIDDEN std::intptr_t g_area_offset;
extern PERCPU_MALLOC_HIDDEN std::intptr_t g_index_offset;

}  // namespace cache_layout

/// The fast path of cache_pop(): one critical section that reads the index itself. Returns
/// committed with the object in `out`, or what stopped it: slow whenever it cannot serve
/// (caches not made yet or made in fallback mode, fallback mode, this thread's area not
/// registered yet, an empty or drained stack), aborted after an abort. The caller then takes
/// the slow path, which handles every one of those, and counts the abort (so that this path
/// makes no call, and its caller needs no stack frame).
__attribute__((always_inline)) inline arch::current_result cache_pop_fast(std::size_t cls,
                                                                          void*& out) noexcept {
#if defined(__x86_64__) || defined(__aarch64__)
  std::intptr_t* first = __atomic_load_n(&cache_layout::g_fast_stacks[cls], __ATOMIC_ACQUIRE);
  if (PERCPU_LIKELY(first != nullptr)) {
    std::intptr_t v = 0;
    const auto r = arch::current_stack_pop<cache_layout::kRegionBytes>(
        cache_layout::g_area_offset, cache_layout::g_index_offset, first, v);
    out = reinterpret_cast<void*>(v);
    return r;
  }
#endif
  (void)cls;
  (void)out;
  return arch::current_result::slow;
}

/// The fast path of cache_push(): committed, or what stopped it (as cache_pop_fast(); a full
/// stack is slow too); the caller then takes the slow path.
__attribute__((always_inline)) inline arch::current_result cache_push_fast(std::size_t cls,
                                                                           void* p) noexcept {
#if defined(__x86_64__) || defined(__aarch64__)
  std::intptr_t* first = __atomic_load_n(&cache_layout::g_fast_stacks[cls], __ATOMIC_ACQUIRE);
  if (PERCPU_LIKELY(first != nullptr)) {
    const auto v = reinterpret_cast<std::intptr_t>(p);
    // The capacity word lies at a fixed distance below the stack, in the index's header.
    const std::intptr_t cap_offset = cache_layout::kCapOffsets[cls];
    return arch::current_stack_push<cache_layout::kRegionBytes>(
        cache_layout::g_area_offset, cache_layout::g_index_offset, first, cap_offset, v);
  }
#endif
  (void)cls;
  (void)p;
  return arch::current_result::slow;
}

/// Makes the caches ready (maps them, and lets the percpu runtime initialize). Returns false
/// when they cannot be used now: out of memory, the runtime's initialization or a switch to
/// fallback mode under way (both allocate, maybe further up this thread's stack); callers then
/// use the central lists. The first call may allocate: call it only where malloc may recurse.
bool cache_init() noexcept;

/// Pops a cached object of `cls` on the calling thread's index; nullptr when that stack is
/// empty. Precondition: cache_init() returned true. Async-signal-safe.
void* cache_pop(std::size_t cls) noexcept;

/// Pushes `p` onto the calling thread's stack of `cls`; false when it holds its current capacity
/// or more.
bool cache_push(std::size_t cls, void* p) noexcept;

/// Records a miss of `cls` on the calling thread's index (its stack was empty on allocation: a
/// refill follows), and grows that capacity by one batch, up to cache_max_capacity(), when the
/// index's budget allows. Returns true when it grew. `counted`, when given, is set to whether
/// the miss was counted: false when the thread is outside the caches (nothing done).
bool cache_note_miss(std::size_t cls, bool* counted = nullptr) noexcept;

/// Counts a flush of `cls` (a batch to the central lists) on the calling thread's index; false,
/// counting nothing, when the thread is outside the caches.
bool cache_note_flush(std::size_t cls) noexcept;

/// The misses (refills) and flushes of `cls` counted over every index.
std::size_t cache_misses(std::size_t cls) noexcept;
std::size_t cache_flushes(std::size_t cls) noexcept;

/// What cache_note_overflow() did to the capacity.
enum class overflow_action { none, grew, lowered };

/// A free of `cls` found the calling thread's stack at its capacity. When allocations of `cls`
/// missed on this index since its previous overflow (the class is in use both ways), the
/// capacity grows by a batch, budget permitting, as for a miss; otherwise the index only frees
/// `cls` now (a thread emptying its data, or a consumer of objects other threads allocate), and
/// the capacity falls by a batch, down to one batch: the objects it would keep pin a span each,
/// which could then never empty and go back (maintenance passes lower unused capacities too,
/// but a program that stops calling the allocator runs none).
overflow_action cache_note_overflow(std::size_t cls) noexcept;

/// The current capacity of `cls` on `index`, and the bytes committed by all of that index's
/// capacities.
std::size_t cache_capacity_of(int index, std::size_t cls) noexcept;
std::size_t cache_committed_bytes(int index) noexcept;

/// The byte budget of one index's caches.
std::size_t cache_budget_bytes() noexcept;

/// For the maintenance pass, on an index in use: lowers by one batch the capacity of every class
/// that had no miss since the previous call, and moves the objects above the new capacity to
/// the central lists (remote close, as cache_drain). Returns the objects moved.
std::size_t cache_shrink_unused(int index) noexcept;

/// Moves up to `n` entries off the calling thread's stack of `cls` into `out`; returns how many.
std::size_t cache_pop_many(std::size_t cls, void** out, std::size_t n) noexcept;

/// Pushes as many of the `n` entries at `in` as fit in the stack's room (not its capacity: a
/// refill may leave up to a batch above it); returns how many (in[0, result)).
std::size_t cache_push_many(std::size_t cls, void* const* in, std::size_t n) noexcept;

/// Drains index `index`'s caches: every class's stack is closed, fenced (membarrier RSEQ, as
/// percpu's remote operations), emptied into the central lists and reopened. For caches of
/// threads that no longer run there (an mm_cid no thread holds now, a CPU gone idle). Returns
/// the objects moved; 0 for an index outside the index space, before cache_init(), when no
/// fence is available, or while another remote operation is in progress (nothing is moved then:
/// it never waits for one, since it may run inside malloc called from one). Allocates nothing,
/// except an exception object when a fence fails. Not async-signal-safe.
std::size_t cache_drain(int index) noexcept;

/// The index space of the caches (0 before cache_init()).
int cache_indices() noexcept;

/// A fingerprint of index `index`'s stacks: it changes whenever any of their counts does, and
/// is 0 when they are all empty. Pages never touched are not read (they hold empty stacks).
std::uint64_t cache_fingerprint(int index) noexcept;

/// Objects cached for `cls` over all indices (reads every index's count: for statistics).
std::size_t cache_count(std::size_t cls) noexcept;

}  // namespace percpu::malloc_impl
