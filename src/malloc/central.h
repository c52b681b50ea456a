// percpu malloc's middle end, per size class: a transfer cache of whole batches (where the
// per-CPU caches' refills and flushes usually end), and a central free list of spans carved into
// objects, which takes spans from the page heap and gives empty ones back.
//
// Thread safety: two locks per size class, one for its transfer cache and one for its spans
// (never held together but across fork and for statistics). Nothing here calls malloc, and all
// state is zero-initialized at load (usable before constructors run).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "malloc/page_heap.h"
#include "malloc/size_classes.h"

namespace percpu::malloc_impl {

/// Whole batches a size class's transfer cache holds.
inline constexpr std::size_t kTransferBatches = 64;
/// Whole batches a size class's transfer cache takes whatever the demand; beyond them, one for
/// each removal not yet matched by an insertion, counting at most kTransferCredit[cls]
/// removals. A batch refused goes to its spans with one of the cache's own (central_insert).
inline constexpr std::size_t kTransferAlways = 2;
/// The bytes of objects a class's credit lets its transfer cache park: one burst of a
/// producer's objects, freed by a consumer while the producer is between bursts, passes
/// through whole (xmalloc-test's 4,096 objects of 64 B; a credit of 8 batches sent 54 of its 64
/// batches to their spans and back, at 0.6x the rate). The spans that parked objects pin bound
/// it too: at 1 MiB, a program that frees its data in random order and idles kept up to 1.7x
/// the memory (`percpu-malloc-workload idle`).
inline constexpr std::size_t kTransferCreditBytes = 256 * 1024;
/// Largest batch of any class (size_class_info::batch).
inline constexpr std::size_t kMaxBatch = 128;

/// Each class's credit (index 1 .. kClassCount - 1), in batches: kTransferCreditBytes of its
/// objects, between 8 and kTransferBatches. A table, so that the transfer lock's critical
/// section reads it rather than divides.
inline constexpr std::array<std::uint8_t, kClassCount> kTransferCredit = [] {
  std::array<std::uint8_t, kClassCount> credit{};
  for (std::size_t c = 1; c < kClassCount; ++c) {
    const std::size_t batches =
        kTransferCreditBytes / (std::size_t{kClasses[c].batch} * kClasses[c].size);
    credit[c] = static_cast<std::uint8_t>(
        batches < 8 ? 8 : (batches > kTransferBatches ? kTransferBatches : batches));
  }
  return credit;
}();

/// Counters of one size class's middle end.
struct central_stats {
  std::size_t spans = 0;             ///< spans carved into this class's objects
  std::size_t free_in_spans = 0;     ///< objects free in those spans (never handed out included)
  std::size_t transfer_objects = 0;  ///< objects in the transfer cache
};

/// Takes up to `n` (at most kMaxBatch) free objects of class `cls` (1 .. kClassCount - 1) into
/// `out`; returns how many, 0 only when out of memory. They come out live, with the cached tag
/// (free_tag.h). An object taken from its span without the span tag stops the process.
std::size_t central_remove(std::size_t cls, void** out, std::size_t n) noexcept;

/// Gives back `n` (at most kMaxBatch) free objects of class `cls`, live, with the cached tag
/// (an object returned to its span without it, or to a span that has it free already, stops the
/// process). Their tag word is overwritten with the span tag.
void central_insert(std::size_t cls, void* const* objects, std::size_t n) noexcept;

/// Returns half of class `cls`'s transfer-cache batches (rounded up) to their spans, so that
/// memory parked there reaches the page heap (and the kernel) when the class goes quiet; called
/// by each maintenance pass. Returns the objects moved.
std::size_t central_release_transfer(std::size_t cls) noexcept;

/// A snapshot of class `cls`'s spans, free objects in them, and transfer-cache objects (takes
/// the class's locks; all zero, touching nothing, for a class never used).
central_stats central_stats_of(std::size_t cls) noexcept;

/// The locks of every class used so far, taken across fork() by the allocator's fork handlers,
/// with the lock that keeps other classes from becoming used until central_unlock_all(). A class
/// never used has no thread inside its locks and no objects, so its state (a page per lock) is
/// not touched: a process that forks keeps that memory unbacked.
void central_lock_all() noexcept;
void central_unlock_all() noexcept;

}  // namespace percpu::malloc_impl
