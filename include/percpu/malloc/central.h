// percpu malloc's middle end, per size class: a transfer cache of whole batches (where the
// per-CPU caches' refills and flushes usually end), and a central free list of spans carved into
// objects, which takes spans from the page heap and gives empty ones back.
//
// Thread safety: one lock per size class. Nothing here calls malloc, and all state is
// zero-initialized at load (usable before constructors run).
#pragma once

#include <cstddef>
#include <cstdint>

#include "percpu/malloc/page_heap.h"
#include "percpu/malloc/size_classes.h"

namespace percpu::malloc_impl {

/// Whole batches a size class's transfer cache holds.
inline constexpr std::size_t kTransferBatches = 64;
/// Largest batch of any class (size_class_info::batch).
inline constexpr std::size_t kMaxBatch = 32;

/// Counters of one size class's middle end.
struct central_stats {
  std::size_t spans = 0;             ///< spans carved into this class's objects
  std::size_t free_in_spans = 0;     ///< objects free in those spans (uncarved included)
  std::size_t transfer_objects = 0;  ///< objects in the transfer cache
};

/// Takes up to `n` (at most kMaxBatch) free objects of class `cls` (1 .. kClassCount - 1) into
/// `out`; returns how many, 0 only when out of memory. They come out live and tagged as cached
/// (free_tag.h).
std::size_t central_remove(std::size_t cls, void** out, std::size_t n) noexcept;

/// Gives back `n` (at most kMaxBatch) free objects of class `cls`, live and tagged as cached.
/// Their first 8 bytes may be overwritten (the free list's link).
void central_insert(std::size_t cls, void* const* objects, std::size_t n) noexcept;

/// Returns half of class `cls`'s transfer-cache batches (rounded up) to their spans, so that
/// memory parked there reaches the page heap (and the kernel) when the class goes quiet; called
/// by each maintenance pass. Returns the objects moved.
std::size_t central_release_transfer(std::size_t cls) noexcept;

/// The object index of `p` in small span `s`, or -1 when `p` is not the start of one of its
/// objects (an interior pointer).
///
/// Why the multiplication is exact: with m = ceil(2^32 / size) = (2^32 + e) / size, 0 <= e <
/// size, an offset j * size gives (j * size * m) >> 32 = j + (j * e) >> 32 = j, because
/// j * e < j * size < 2^32 inside any span; an offset that is not a multiple fails the check.
inline std::ptrdiff_t object_index(std::size_t cls, std::uintptr_t start, const void* p) noexcept {
  const size_class_info& info = kClasses[cls];
  const auto off = static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(p) - start);
  const std::uint64_t index = (off * info.reciprocal) >> 32;
  // A multiple of the size in the span's tail is no object either (it would end past the span).
  return index * info.size == off && index < info.objects_per_span()
             ? static_cast<std::ptrdiff_t>(index)
             : -1;
}
inline std::ptrdiff_t object_index(const span& s, const void* p) noexcept {
  return object_index(s.size_class, reinterpret_cast<std::uintptr_t>(s.start()), p);
}

/// A snapshot of class `cls`'s spans, free objects in them, and transfer-cache objects (takes
/// the class's lock).
central_stats central_stats_of(std::size_t cls) noexcept;

/// Every class's lock, taken across fork() by the allocator's fork handlers.
void central_lock_all() noexcept;
void central_unlock_all() noexcept;

}  // namespace percpu::malloc_impl
