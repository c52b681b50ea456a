// percpu malloc's page heap: spans (runs of 8 KiB pages) carved from memory mapped in large
// regions, a pagemap from any address to its span, coalescing of free spans, and returning free
// memory to the kernel (madvise). It never calls malloc: its own bookkeeping comes from mmap.
//
// Two arenas: small spans (the size classes') and large allocations (above them) are carved
// from regions of their own, with free lists of their own, and never merge (small spans' regions
// are 2 MiB-aligned and get huge page advice while the arena is big and nearly all in use:
// page_heap.cpp). A freed large block's memory is reused by the next large allocation without a
// system call, and both arenas' free memory is returned to the kernel by the same decay and
// bound. Growing a large block in place takes pages from the free span after it.
//
// Returning free memory (decay): a free span stays backed, ready for the next allocation
// without a page fault, until it has been free for kDecayNs (release_older_than(), run by the
// maintenance passes) or until backed free memory passes free_bound(): the largest of
// kFreeBoundFloor, a quarter of the memory in use, and the bytes of recycled spans (freed in the
// last 200 ms) taken in the last 100-200 ms: a program that frees spans and takes them again at
// that rate would fault released ones in again; one that stops taking them loses that share,
// but a program that stops calling the allocator in the middle of such churn keeps it until its
// next call. A free of a small span that passes the bound releases down to half of it at once,
// largest spans first, so a program that frees most of its memory and then stops calling the
// allocator holds at most the bound, with no thread of ours (large blocks, resident perhaps
// only where written, wait for that or for the decay).
//
// Thread safety: allocate_span(), free_span(), allocate_large(), free_large(), resize_large(),
// release() and stats() take the heap's lock; span_of() is lock-free (the pagemap only gains
// leaves, and entries are published with release stores).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "malloc/size_classes.h"
#include "percpu/internal/config.h"

namespace percpu::malloc_impl {

/// Largest size allocate_large() and resize_large() accept (2^46 bytes, 64 TiB): above any
/// mapping the kernel grants, and far from overflowing the page arithmetic.
inline constexpr std::size_t kMaxLargeBytes = std::size_t{1} << 46;

/// Largest alignment allocate_large() accepts (1 GiB).
inline constexpr std::size_t kMaxLargeAlignment = std::size_t{1} << 30;

/// Words of a span's free-object bitmap: 512 objects, the most of any class (16 B in a page).
inline constexpr std::size_t kSpanMapWords = 8;

/// A run of pages: free, carved into objects of one size class, or one large allocation.
struct span {
  enum class state : std::uint8_t { free, small, large };
  std::uintptr_t first_page = 0;  ///< address >> kPageShift
  std::size_t pages = 0;
  state kind = state::free;
  std::uint8_t size_class = 0;  ///< for small spans
  bool released = false;        ///< free and returned to the kernel (reads as zero when reused)
  /// Carved from a region of the small spans' arena (huge-page advised while that arena is big
  /// and nearly all in use), else from one of the large blocks' arena: the arenas' spans never
  /// merge.
  bool small_arena = false;
  /// Small spans: objects out of the span (in caches or with users); kept by the central free
  /// list, with free_map.
  std::uint32_t allocated = 0;
  span* prev = nullptr;  ///< links of the list the span is on (free lists, central lists)
  span* next = nullptr;
  /// Small spans: bit i set when object i is free in the span (never handed out, or returned).
  /// A bitmap rather than a list through the objects: taking and returning objects reads none
  /// of them.
  std::uint64_t free_map[kSpanMapWords] = {};

  std::int64_t freed_ns = 0;        ///< when last freed (CLOCK_MONOTONIC_COARSE); 0: never in use
  std::size_t requested_bytes = 0;  ///< large spans: the size asked for
  std::size_t offset = 0;           ///< large spans: user pointer = start() + offset (alignment)

  char* start() const { return reinterpret_cast<char*>(first_page << kPageShift); }
  std::size_t bytes() const { return pages << kPageShift; }
};
// The page heap's bookkeeping rounds each span's 128 bytes up to a power of two: one field more
// would double the metadata (12.5 MiB for 800 MiB of one-page spans).
static_assert(sizeof(span) <= 128, "span no longer fits its 128-byte metadata block");

/// Backed free memory is released once it has been free this long (ns).
inline constexpr std::int64_t kDecayNs = 1'000'000'000;
/// The least of free_bound(): backed free memory a free of a small span keeps however little
/// is in use (bytes).
inline constexpr std::size_t kFreeBoundFloor = std::size_t{8} << 20;

/// Counters of the page heap, in bytes.
struct page_heap_stats {
  std::size_t mapped = 0;             ///< mapped in regions (small, large and free spans)
  std::size_t in_use = 0;             ///< in small spans
  std::size_t free = 0;               ///< in free spans still backed by memory
  std::size_t released = 0;           ///< in free spans returned to the kernel
  std::size_t large = 0;              ///< in large spans (allocations above the size classes)
  std::size_t unmapped = 0;           ///< free spans unmapped since start because a mapping failed
  std::size_t metadata = 0;           ///< mapped for the heap's own bookkeeping
  std::size_t released_by_bound = 0;  ///< returned at frees past free_bound() since start
  std::size_t small_arena = 0;        ///< mapped in the small spans' regions (in `mapped`)
  bool huge_advice = false;           ///< the small spans' regions are advised MADV_HUGEPAGE now
  std::size_t huge_advice_changes = 0;  ///< times the advice was given or withdrawn since start
};

/// The process's page heap (one instance; see page_heap()).
class page_heap_t {
 public:
  /// A span of `pages` pages for size class `cls` (kind small), its pages mapped to it in the
  /// pagemap, each entry carrying the class and the page's place in the span (pagemap::entry)
  /// when `cls` is nonzero (then `pages` is at most 255; class 0: a span for tests, whose
  /// entries carry no class). nullptr when out of memory.
  span* allocate_span(std::size_t pages, std::size_t cls = 0);

  /// Returns a span from allocate_span() to the heap; it coalesces with free neighbours.
  void free_span(span* s);

  /// A large allocation of `bytes` whose user pointer, start() + offset, is aligned on
  /// `alignment` (a power of two): a span of kind large, every page of it in the pagemap.
  /// `zeroed` says whether its memory reads as zero (never touched, or returned to the kernel
  /// since). nullptr when out of memory (the kernel refused the region: commit limit,
  /// RLIMIT_AS, map count; free spans are unmapped and the mapping retried first), for sizes
  /// above 2^46 bytes, or for alignments above kMaxLargeAlignment.
  span* allocate_large(std::size_t bytes, std::size_t alignment, bool& zeroed);

  /// Frees the large allocation whose user pointer is `p` into the free lists (coalesced with
  /// free neighbours). Returns false, changing nothing, when `p` is not (or no longer) such a
  /// pointer: a double or invalid free.
  bool free_large(const void* p);

  /// Resizes the large allocation whose user pointer is `p` to hold `bytes` without moving it:
  /// shrinking frees its tail pages; growing takes the pages it needs from the free span right
  /// after it. Returns false, changing nothing, when that span is missing or too small (or `p`
  /// is not a large allocation's pointer).
  bool resize_large(const void* p, std::size_t bytes);

  /// The span that holds address `p`, or nullptr if percpu malloc never mapped it. For a large
  /// span only its first page is mapped. Two loads (lock-free; inline: every free uses it).
  span* span_of(const void* p) const noexcept;

  /// The pagemap entry of address `p` (pagemap::entry: its span, and for a page of a small
  /// span the size class and the page's place in it), 0 if percpu malloc never mapped it. The
  /// same two loads as span_of(): a free learns the class without loading the span.
  std::uintptr_t entry_of(const void* p) const noexcept;

  /// Returns free spans' memory to the kernel until at most `keep_bytes` of free memory stays
  /// backed, largest spans first; returns the bytes released.
  std::size_t release(std::size_t keep_bytes);

  /// Returns to the kernel every backed free span freed before `cutoff_ns` (CLOCK_MONOTONIC_COARSE
  /// time): the decay of the maintenance passes. Returns the bytes released.
  std::size_t release_older_than(std::int64_t cutoff_ns);

  /// The most backed free memory kept after a free: max(kFreeBoundFloor, (in use + large) / 4,
  /// bytes of recycled spans taken in the current or the previous 100 ms window).
  std::size_t free_bound();

  page_heap_stats stats();

  /// Bookkeeping memory for the allocator itself (zeroed, 16-byte aligned, never from malloc),
  /// and its return. Sizes are rounded up to a power of two of at least 16 bytes; at most 1 MiB.
  void* metadata_alloc(std::size_t bytes);
  void metadata_free(void* p, std::size_t bytes);

  /// Held across fork() by the allocator's fork handlers.
  void lock() noexcept;
  void unlock() noexcept;

 private:
  void set_pagemap(std::uintptr_t page, span* s);
  span* new_span();
  span* span_for_mapping(char* base, std::size_t pages, span::state kind, bool small_arena);
  void delete_span(span* s);
  void insert_free(span* s);
  void remove_free(span* s);
  span* grow(std::size_t pages, bool small_arena);
  void note_small_region(char* base, std::size_t bytes);
  span* take_free(std::size_t pages, bool small_arena);
  void free_locked(span* s);
  span* merge_neighbours(span* s);
  span* join(span* lo, span* hi);
  std::size_t unmap_free_locked();
  std::size_t release_locked(std::size_t keep_bytes, std::int64_t older_than_ns);
  void enforce_free_bound_locked();
  void* meta_alloc_locked(std::size_t bytes);
};

namespace pagemap {

/// Bits of a user address: 47 on x86-64 (4-level paging; 5-level hands out higher addresses
/// only to mmap hints above them), 48 on aarch64 (Linux's default VA_BITS; its mmap starts just
/// below 2^48). A mapping above them cannot be recorded: the page heap then unmaps it and fails
/// the allocation (ENOMEM) rather than write outside the root.
#if defined(__aarch64__)
inline constexpr unsigned kUserAddressBits = 48;
#else
inline constexpr unsigned kUserAddressBits = 47;
#endif

// Page numbers of 47-bit user addresses have 34 bits: the root has 2^17 leaves of 2^17 entries
// (a leaf covers 1 GiB of address space and costs 1 MiB, mapped when first needed); 48-bit
// addresses need 2^18 leaves.
inline constexpr unsigned kLeafBits = 17;
inline constexpr std::size_t kLeafEntries = std::size_t{1} << kLeafBits;
inline constexpr std::size_t kRootEntries = std::size_t{1}
                                            << (kUserAddressBits - kPageShift - kLeafBits);
/// The root: leaves are published with release stores and never unmapped.
extern std::atomic<std::atomic<std::uintptr_t>*> g_root[kRootEntries];

/// A pagemap entry: the span (bits 0-47: a user-space address, below 2^48 on both
/// architectures), and for a page of a small span its size class (bits 56-63, nonzero) and its
/// place in the span in pages (bits 48-55), so that a free finds the class, and the object's
/// offset in its span, with no load of the span. Entries of other spans have class 0.
struct entry {
  static constexpr unsigned kPlaceShift = 48;
  static constexpr unsigned kClassShift = 56;
  static constexpr std::uintptr_t kSpanMask = (std::uintptr_t{1} << kPlaceShift) - 1;

  static std::uintptr_t make(const span* s, std::uintptr_t page) noexcept {
    auto e = reinterpret_cast<std::uintptr_t>(s);
    if (s != nullptr && s->kind == span::state::small && s->size_class != 0)
      e |= std::uintptr_t{s->size_class} << kClassShift | (page - s->first_page) << kPlaceShift;
    return e;
  }
  static span* span_of(std::uintptr_t e) noexcept { return reinterpret_cast<span*>(e & kSpanMask); }
  /// The size class of a small span's page; 0 for any other entry.
  static std::size_t size_class(std::uintptr_t e) noexcept { return e >> kClassShift; }
  /// The offset of `p` from the first byte of its small span, whose entry is `e`: its offset in
  /// its page plus the page's place, shifted into bytes straight from the entry's bits.
  static std::uintptr_t offset_in_span(std::uintptr_t e, const void* p) noexcept {
    constexpr std::uintptr_t kPlaceBytes = std::uintptr_t{0xFF} << kPageShift;
    return (reinterpret_cast<std::uintptr_t>(p) & (kPageSize - 1)) +
           ((e >> (kPlaceShift - kPageShift)) & kPlaceBytes);
  }
};

}  // namespace pagemap

inline std::uintptr_t page_heap_t::entry_of(const void* p) const noexcept {
  const std::uintptr_t page = reinterpret_cast<std::uintptr_t>(p) >> kPageShift;
  const std::uintptr_t root = page >> pagemap::kLeafBits;
  // Both unlikely: free()'s fast path inlines this, and a taken branch there costs it more
  // than an instruction does.
  if (PERCPU_UNLIKELY(root >= pagemap::kRootEntries)) return 0;
  std::atomic<std::uintptr_t>* leaf = pagemap::g_root[root].load(std::memory_order_acquire);
  if (PERCPU_UNLIKELY(leaf == nullptr)) return 0;
  return leaf[page & (pagemap::kLeafEntries - 1)].load(std::memory_order_acquire);
}

inline span* page_heap_t::span_of(const void* p) const noexcept {
  return pagemap::entry::span_of(entry_of(p));
}

/// The page heap of the process (stateless: its state is zero-initialized at load, so it works
/// before any constructor runs).
extern page_heap_t g_page_heap;
inline page_heap_t& page_heap() noexcept {
  return g_page_heap;
}

}  // namespace percpu::malloc_impl
