// percpu malloc's page heap: regions mapped from the kernel, carved into spans, free spans
// coalesced and kept in lists by size, memory returned with madvise, and a pagemap (a two-level
// radix tree over page numbers) from any address to its span. All state is zero-initialized at
// load, so it works before any constructor runs; nothing here calls malloc.
#include "malloc/page_heap.h"

#include "malloc/reentrancy.h"
#include "percpu/internal/config.h"

#include <pthread.h>
#include <sys/mman.h>
#include <time.h>

#include <cstring>
#include <new>

namespace percpu::malloc_impl {
namespace {

using pagemap::g_root;
using pagemap::kLeafBits;
using pagemap::kLeafEntries;
// Regions are mapped at least this big (16 MiB), and spans of up to kExactLists pages have a
// free list each; longer free spans share one list.
constexpr std::size_t kRegionPages = 2048;
constexpr std::size_t kExactLists = 128;
constexpr std::size_t kMetaBlock = std::size_t{1} << 20;

// Two arenas, each with its regions and free lists: small spans (size classes) and large
// blocks. Small spans' regions are aligned on the transparent huge page size (2 MiB, the PMD
// size with 4 KiB kernel pages) and advised MADV_HUGEPAGE while the arena's spans in use are at
// least kHugeAdviceFrom and nearly all of it: a program whose small objects spread over
// hundreds of MiB (larson at 64 threads hands each thread objects that every thread on its CPU
// freed) then misses the TLB per 2 MiB rather than per 4 KiB (larson at 64 threads ran 1.1-1.2x
// faster). A smaller program stays on small pages (a huge page would hold 2 MiB for its first
// object), and so does an arena with much free in it: khugepaged collapses every 2 MiB that
// holds a live object back into a huge page, free spans released in it included (a program
// that kept 2% of 800 MB of objects, 46% of its arena in use, went from 513 to 943 MiB resident
// within seconds with khugepaged scanning fast). With the advice withdrawn below 3/4 in use,
// what khugepaged can bring back is at most a quarter of the arena, as much as the free bound
// keeps backed anyway. Large blocks get no advice: one written in part would be faulted in
// whole, and the faults would wait for compaction (a random mix of blocks up to 2 MiB ran
// 2.5-11x slower with every region advised).
constexpr std::size_t kHugePageBytes = std::size_t{2} << 20;
constexpr std::size_t kHugeAdviceFrom = std::size_t{32} << 20;
constexpr int kSmallArena = 1;
constexpr int kLargeArena = 0;

pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;

// Guarded by g_lock:
span* g_free_exact[2][kExactLists + 1];  // by arena, then pages; doubly linked
span* g_free_long[2];                    // longer than kExactLists pages, by arena
// The small arena's regions, for its huge page advice (all of them: they are never unmapped
// but by unmap_free_locked(), which freezes the advice); their bytes and the advice's state are
// g_stats.small_arena and g_stats.huge_advice.
struct small_region {
  char* base;
  std::size_t bytes;
  small_region* next;
};
small_region* g_small_regions;
bool g_advice_frozen;  // part of the small arena was unmapped: its addresses may be another
                       // mapping's now, so the regions' advice stays as it is
span* g_spare_spans;   // recycled span structs
char* g_meta_next;     // bump pointer of the current metadata block
char* g_meta_end;
void* g_meta_free[21];  // recycled metadata blocks by log2 size (16 B .. 1 MiB)
page_heap_stats g_stats;

// The heap's lock, counted for signal handlers (reentrancy.h).
class locked : counted_lock {
 public:
  locked() : counted_lock(&g_lock) {}
};

// Maps `bytes` aligned on `align` (a power of two, at least a page of the page heap: mmap aligns
// on the kernel's 4 KiB page). Without MAP_NORESERVE: the kernel's commit accounting sees the
// region, so a request glibc's malloc would be refused (beyond the overcommit heuristic or the
// strict commit limit) is refused here too, with ENOMEM, instead of being granted and killing the
// process on touch.
char* map_aligned(std::size_t bytes, std::size_t align) {
  void* raw =
      mmap(nullptr, bytes + align, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  if (raw == nullptr) {
    // Only where vm.mmap_min_addr is 0. Page 0 must hold no span: free(NULL) reads its pagemap
    // entry on the fast path (fast_path.h). Its first kernel page stays mapped and unused, so
    // the retry lands elsewhere.
    munmap(static_cast<char*>(raw) + 4096, bytes + align - 4096);
    return map_aligned(bytes, align);
  }
  const auto start = reinterpret_cast<std::uintptr_t>(raw);
  const std::uintptr_t aligned = (start + align - 1) & ~(align - 1);
  if (aligned > start) munmap(raw, aligned - start);
  const std::uintptr_t end = start + bytes + align;
  if (end > aligned + bytes)
    munmap(reinterpret_cast<void*>(aligned + bytes), end - (aligned + bytes));
  return reinterpret_cast<char*>(aligned);
}

std::int64_t coarse_now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

// Bytes of recycled spans handed out (small and large: spans freed within the last two
// windows of kChurnWindowNs, backed or released since) in the current and the previous window:
// a program that frees spans and takes them again at this rate would fault in again whatever
// was released, so the bound keeps that much free memory backed. Memory never freed before (a
// program building up its data) is no churn: a program that allocates, frees all and stops
// keeps only the bound's other terms.
constexpr std::int64_t kChurnWindowNs = 100'000'000;
std::int64_t g_window_start_ns;
std::size_t g_taken_now, g_taken_before;

void note_taken_locked(const span* s) {
  const std::int64_t now = coarse_now_ns();
  if (s->freed_ns == 0 || now - s->freed_ns >= 2 * kChurnWindowNs) return;
  const std::size_t bytes = s->bytes();
  if (now - g_window_start_ns >= kChurnWindowNs) {
    g_taken_before = now - g_window_start_ns >= 2 * kChurnWindowNs ? 0 : g_taken_now;
    g_taken_now = 0;
    g_window_start_ns = now;
  }
  g_taken_now += bytes;
}

std::size_t free_bound_locked() {
  const std::size_t used = g_stats.in_use + g_stats.large;
  std::size_t bound = used / 4;
  if (bound < kFreeBoundFloor) bound = kFreeBoundFloor;
  // Churn counts only while it goes on: a window that ended long ago counts nothing. (Capped at
  // the memory in use, a program whose use swings to near zero and back, as xmalloc-test's
  // does, faulted 3x as often: 29-34 thousand faults against 9-10.)
  if (coarse_now_ns() - g_window_start_ns < 2 * kChurnWindowNs) {
    const std::size_t churn = g_taken_now > g_taken_before ? g_taken_now : g_taken_before;
    if (churn > bound) bound = churn;
  }
  return bound;
}

// The free time of two free spans joined: the older one's. With the newer one (or any weighting
// toward it), a large free span that a program keeps carving a block from and freeing again
// looks freed just now at every free and never decays; with the older one, memory freed just
// now beside memory freed earlier goes back with it, at most kDecayNs after the earlier free.
std::int64_t joined_age(const span* a, const span* b) {
  return a->freed_ns < b->freed_ns ? a->freed_ns : b->freed_ns;
}

unsigned log2_bucket(std::size_t bytes) {
  unsigned b = 4;  // 16 bytes
  while ((std::size_t{1} << b) < bytes) ++b;
  return b;
}

}  // namespace

page_heap_t g_page_heap;  // stateless: the state is above, zero-initialized
std::atomic<std::atomic<std::uintptr_t>*> pagemap::g_root[pagemap::kRootEntries];

void page_heap_t::lock() noexcept {
  pthread_mutex_lock(&g_lock);
}
void page_heap_t::unlock() noexcept {
  pthread_mutex_unlock(&g_lock);
}

void page_heap_t::set_pagemap(std::uintptr_t page, span* s) {
  const std::uintptr_t root = page >> kLeafBits;
  if (root >= pagemap::kRootEntries) return;  // above the pagemap: callers see span_of() fail
  std::atomic<std::uintptr_t>* leaf = g_root[root].load(std::memory_order_relaxed);
  if (leaf == nullptr) {
    void* m = mmap(nullptr, kLeafEntries * sizeof(std::atomic<std::uintptr_t>),
                   PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) return;  // callers map leaves before they need them (grow, map_large)
    leaf = static_cast<std::atomic<std::uintptr_t>*>(m);
    g_stats.metadata += kLeafEntries * sizeof(std::atomic<std::uintptr_t>);
    g_root[root].store(leaf, std::memory_order_release);
  }
  leaf[page & (kLeafEntries - 1)].store(pagemap::entry::make(s, page), std::memory_order_release);
}

void* page_heap_t::meta_alloc_locked(std::size_t bytes) {
  const unsigned b = log2_bucket(bytes);
  const std::size_t size = std::size_t{1} << b;
  if (b < sizeof g_meta_free / sizeof g_meta_free[0] && g_meta_free[b] != nullptr) {
    void* p = g_meta_free[b];
    g_meta_free[b] = *static_cast<void**>(p);
    std::memset(p, 0, size);
    return p;
  }
  if (g_meta_next == nullptr || static_cast<std::size_t>(g_meta_end - g_meta_next) < size) {
    void* m = mmap(nullptr, kMetaBlock, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return nullptr;
    g_meta_next = static_cast<char*>(m);
    g_meta_end = g_meta_next + kMetaBlock;
    g_stats.metadata += kMetaBlock;
  }
  void* p = g_meta_next;
  g_meta_next += size;
  return p;  // fresh mmap memory: zero
}

void* page_heap_t::metadata_alloc(std::size_t bytes) {
  if (bytes > kMetaBlock) return nullptr;
  locked l;
  return meta_alloc_locked(bytes);
}

void page_heap_t::metadata_free(void* p, std::size_t bytes) {
  if (p == nullptr) return;
  locked l;
  const unsigned b = log2_bucket(bytes);
  *static_cast<void**>(p) = g_meta_free[b];
  g_meta_free[b] = p;
}

span* page_heap_t::new_span() {
  if (g_spare_spans != nullptr) {
    span* s = g_spare_spans;
    g_spare_spans = s->next;
    *s = span{};
    return s;
  }
  void* m = meta_alloc_locked(sizeof(span));
  return m == nullptr ? nullptr : new (m) span{};
}

void page_heap_t::delete_span(span* s) {
  s->next = g_spare_spans;
  g_spare_spans = s;
}

void page_heap_t::insert_free(span* s) {
  const int a = s->small_arena ? kSmallArena : kLargeArena;
  span** list = s->pages <= kExactLists ? &g_free_exact[a][s->pages] : &g_free_long[a];
  s->prev = nullptr;
  s->next = *list;
  if (*list != nullptr) (*list)->prev = s;
  *list = s;
  (s->released ? g_stats.released : g_stats.free) += s->bytes();
}

void page_heap_t::remove_free(span* s) {
  const int a = s->small_arena ? kSmallArena : kLargeArena;
  span** list = s->pages <= kExactLists ? &g_free_exact[a][s->pages] : &g_free_long[a];
  if (s->prev != nullptr) {
    s->prev->next = s->next;
  } else {
    *list = s->next;
  }
  if (s->next != nullptr) s->next->prev = s->prev;
  s->prev = s->next = nullptr;
  (s->released ? g_stats.released : g_stats.free) -= s->bytes();
}

// A span struct for `pages` pages just mapped at `base`; without one the mapping is undone.
span* page_heap_t::span_for_mapping(char* base, std::size_t pages, span::state kind,
                                    bool small_arena) {
  span* s = new_span();
  if (s == nullptr) {
    munmap(base, pages << kPageShift);
    return nullptr;
  }
  s->first_page = reinterpret_cast<std::uintptr_t>(base) >> kPageShift;
  s->pages = pages;
  s->kind = kind;
  s->small_arena = small_arena;
  return s;
}

// Maps a new region of at least `pages` pages for an arena as one free span (released: never
// touched). When the kernel refuses (commit limit, RLIMIT_AS, vm.max_map_count), the address
// space cached in free spans is given back and the mapping tried once more.
span* page_heap_t::grow(std::size_t pages, bool small_arena) {
  const std::size_t n = pages > kRegionPages ? pages : kRegionPages;
  const std::size_t align = small_arena ? kHugePageBytes : kPageSize;
  char* base = map_aligned(n << kPageShift, align);
  if (base == nullptr && unmap_free_locked() != 0) base = map_aligned(n << kPageShift, align);
  if (base == nullptr) return nullptr;
  span* s = span_for_mapping(base, n, span::state::free, small_arena);
  if (s == nullptr) return nullptr;
  s->released = true;
  for (std::size_t i = 0; i < n; ++i) set_pagemap(s->first_page + i, s);
  if (span_of(base) != s || span_of(base + ((n - 1) << kPageShift)) != s) {
    munmap(base, n << kPageShift);  // no memory for a pagemap leaf
    delete_span(s);
    return nullptr;
  }
  g_stats.mapped += n << kPageShift;
  if (small_arena) note_small_region(base, n << kPageShift);
  insert_free(s);
  return s;
}

// A new region of the small arena, `bytes` at `base`: recorded for the arena's huge page advice,
// and advised at once while the advice holds. (Without memory for its record, it keeps the
// advice it gets now.)
void page_heap_t::note_small_region(char* base, std::size_t bytes) {
  g_stats.small_arena += bytes;
  if (void* m = meta_alloc_locked(sizeof(small_region)))
    g_small_regions = new (m) small_region{base, bytes, g_small_regions};
  if (g_stats.huge_advice) madvise(base, bytes, MADV_HUGEPAGE);
}

// Gives or withdraws the small arena's huge page advice as its use has changed (see
// kHugeAdviceFrom): given at kHugeAdviceFrom in use and 7/8 of the arena, withdrawn below 3/4,
// so that a program must allocate or free an eighth of the arena between two changes (each a
// madvise per region). A kernel without transparent huge pages refuses the advice (EINVAL):
// ignored.
static void update_huge_advice_locked() {
  if (g_advice_frozen) return;
  const std::size_t used = g_stats.in_use;
  bool on = g_stats.huge_advice;
  if (!on && used >= kHugeAdviceFrom && used >= g_stats.small_arena / 8 * 7) on = true;
  if (on && used < g_stats.small_arena / 4 * 3) on = false;
  if (on == g_stats.huge_advice) return;
  g_stats.huge_advice = on;
  ++g_stats.huge_advice_changes;
  for (small_region* r = g_small_regions; r != nullptr; r = r->next)
    madvise(r->base, r->bytes, on ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
}

// Unmaps every free span (backed or released) and forgets its pages; returns the bytes. The
// last resort of grow(): cached address space must not make a request fail.
std::size_t page_heap_t::unmap_free_locked() {
  std::size_t bytes = 0;
  // A span the kernel refuses to unmap (ENOMEM: splitting its mapping would pass
  // vm.max_map_count, the very limit that may have sent us here) stays a free span.
  span* kept = nullptr;
  auto unmap_list = [&](span** list) {
    while (span* s = *list) {
      remove_free(s);
      if (munmap(s->start(), s->bytes()) != 0) {
        s->next = kept;
        kept = s;
        continue;
      }
      for (std::size_t i = 0; i < s->pages; ++i) set_pagemap(s->first_page + i, nullptr);
      g_stats.mapped -= s->bytes();
      if (s->small_arena) {
        g_stats.small_arena -= s->bytes();
        g_advice_frozen = true;
      }
      bytes += s->bytes();
      delete_span(s);
    }
  };
  for (int a : {kLargeArena, kSmallArena}) {
    unmap_list(&g_free_long[a]);
    for (std::size_t n = 1; n <= kExactLists; ++n) unmap_list(&g_free_exact[a][n]);
  }
  while (span* s = kept) {
    kept = s->next;
    insert_free(s);
  }
  g_stats.unmapped += bytes;
  return bytes;
}

// A free span of exactly `pages` pages of an arena, taken off its free lists (split from a longer
// one, or from a new region); its kind is still free and its `released` says whether it reads
// as zero.
span* page_heap_t::take_free(std::size_t pages, bool small_arena) {
  const int a = small_arena ? kSmallArena : kLargeArena;
  span* s = nullptr;
  for (std::size_t n = pages; n <= kExactLists && s == nullptr; ++n) s = g_free_exact[a][n];
  if (s == nullptr) {
    for (span* c = g_free_long[a]; c != nullptr; c = c->next)  // best fit among the long ones
      if (c->pages >= pages && (s == nullptr || c->pages < s->pages)) s = c;
  }
  if (s == nullptr) s = grow(pages, small_arena);
  if (s == nullptr) return nullptr;
  remove_free(s);
  if (s->pages > pages) {
    // The front part is taken, with a new struct: only its pages are rewritten in the pagemap
    // (the rest keeps the struct its entries already name).
    span* taken = new_span();
    if (taken == nullptr) {
      insert_free(s);
      return nullptr;
    }
    taken->first_page = s->first_page;
    taken->pages = pages;
    taken->kind = span::state::free;
    taken->released = s->released;
    taken->small_arena = s->small_arena;
    taken->freed_ns = s->freed_ns;
    for (std::size_t i = 0; i < pages; ++i) set_pagemap(taken->first_page + i, taken);
    s->first_page += pages;
    s->pages -= pages;
    insert_free(s);
    s = taken;
  }
  return s;
}

span* page_heap_t::allocate_span(std::size_t pages, std::size_t cls) {
  if (pages == 0 || (cls != 0 && pages > 0xFF) || cls >= kClassCount) return nullptr;
  locked l;
  span* s = take_free(pages, true);
  if (s == nullptr) return nullptr;
  s->kind = span::state::small;
  s->size_class = static_cast<std::uint8_t>(cls);
  // Before the span is published to the central list, its pages' entries carry its class.
  if (cls != 0)
    for (std::size_t i = 0; i < s->pages; ++i) set_pagemap(s->first_page + i, s);
  g_stats.in_use += s->bytes();
  note_taken_locked(s);
  update_huge_advice_locked();
  return s;
}

// Joins two free spans off the lists, `lo` right before `hi`, into one: the bigger keeps its
// struct and only the smaller's pages are rewritten in the pagemap.
span* page_heap_t::join(span* lo, span* hi) {
  if (lo->pages >= hi->pages) {
    for (std::size_t i = 0; i < hi->pages; ++i) set_pagemap(hi->first_page + i, lo);
    lo->freed_ns = joined_age(lo, hi);
    lo->pages += hi->pages;
    delete_span(hi);
    return lo;
  }
  for (std::size_t i = 0; i < lo->pages; ++i) set_pagemap(lo->first_page + i, hi);
  hi->freed_ns = joined_age(lo, hi);
  hi->first_page = lo->first_page;
  hi->pages += lo->pages;
  delete_span(lo);
  return hi;
}

void page_heap_t::free_span(span* s) {
  locked l;
  g_stats.in_use -= s->bytes();
  const bool had_class = s->size_class != 0;
  s->size_class = 0;
  s->allocated = 0;
  for (std::uint64_t& w : s->free_map) w = 0;
  s->kind = span::state::free;
  // Its pages' entries lose the class (a merge rewrites only the smaller span's entries).
  if (had_class)
    for (std::size_t i = 0; i < s->pages; ++i) set_pagemap(s->first_page + i, s);
  free_locked(s);
  update_huge_advice_locked();
  // The bound is kept at frees of small spans, whose every page is resident (their objects were
  // tagged when the span was carved). A freed large block may be resident only where its
  // program wrote (a block of 300 KiB whose first byte alone was written holds one page):
  // releasing it at once would save little memory and cost its program a page fault when it
  // allocates the block again (10,000 such blocks freed and allocated in rounds ran at half
  // the rate). Large blocks' spans wait for the next small span's free, or the passes' decay.
  enforce_free_bound_locked();
}

// Puts `s` (its pages no longer used) on the free lists, backed, coalesced with its backed free
// neighbours.
void page_heap_t::free_locked(span* s) {
  s->kind = span::state::free;
  s->released = false;
  s->requested_bytes = s->offset = 0;
  s->freed_ns = coarse_now_ns();
  insert_free(merge_neighbours(s));
}

// Past the bound, releases down to half of it, largest spans first (one walk of the lists;
// the age of each span matters to the passes' decay, not here: this is the cap). Releasing well
// below the bound makes each release worth its madvise calls: a program freeing steadily
// triggers one per half-bound of memory it frees.
void page_heap_t::enforce_free_bound_locked() {
  const std::size_t bound = free_bound_locked();
  if (PERCPU_LIKELY(g_stats.free <= bound)) return;
  g_stats.released_by_bound += release_locked(bound / 2, INT64_MAX);
}

// Coalesces free span `s` (off the lists) with the free neighbours of its arena in the same
// state (both backed or both released) and returns the result, off the lists. Spans in different
// states stay apart: merging a backed span into a released one would return its memory to the
// kernel (tcmalloc's old page heap did), and the next allocation of it would fault on every page.
span* page_heap_t::merge_neighbours(span* s) {
  if (span* before = span_of(s->start() - 1);
      before != nullptr && before->kind == span::state::free && before->released == s->released &&
      before->small_arena == s->small_arena) {
    remove_free(before);
    s = join(before, s);
  }
  if (span* after = span_of(s->start() + s->bytes());
      after != nullptr && after->kind == span::state::free && after->released == s->released &&
      after->small_arena == s->small_arena) {
    remove_free(after);
    s = join(s, after);
  }
  return s;
}

span* page_heap_t::allocate_large(std::size_t bytes, std::size_t alignment, bool& zeroed) {
  if (alignment < kPageSize) alignment = kPageSize;
  // The span keeps the room it needed to align the pointer: an absurd alignment would reserve
  // (and count) that much address space.
  if (bytes == 0 || bytes > kMaxLargeBytes || alignment > kMaxLargeAlignment) return nullptr;
  const std::size_t extra = alignment - kPageSize;  // room to move the user pointer up
  const std::size_t pages = (bytes + extra + kPageSize - 1) >> kPageShift;
  locked l;
  span* s = take_free(pages, false);
  if (s == nullptr) return nullptr;
  zeroed = s->released;
  s->released = false;
  s->kind = span::state::large;
  s->requested_bytes = bytes;
  const auto start = reinterpret_cast<std::uintptr_t>(s->start());
  s->offset = ((start + alignment - 1) & ~(alignment - 1)) - start;
  g_stats.large += s->bytes();
  note_taken_locked(s);
  return s;
}

// The large span whose user pointer is `p`, or nullptr.
static span* large_span_of(const page_heap_t& heap, const void* p) {
  span* s = heap.span_of(p);
  if (s == nullptr || s->kind != span::state::large || s->start() + s->offset != p) return nullptr;
  return s;
}

bool page_heap_t::free_large(const void* p) {
  locked l;
  span* s = large_span_of(*this, p);
  if (s == nullptr) return false;
  g_stats.large -= s->bytes();
  free_locked(s);
  return true;
}

bool page_heap_t::resize_large(const void* p, std::size_t bytes) {
  if (bytes == 0 || bytes > kMaxLargeBytes) return false;
  locked l;
  span* s = large_span_of(*this, p);
  if (s == nullptr) return false;
  const std::size_t pages = (s->offset + bytes + kPageSize - 1) >> kPageShift;
  if (pages < s->pages) {  // shrink: the tail becomes a free span
    span* tail = new_span();
    if (tail == nullptr) return true;  // keeps its pages: still big enough
    tail->first_page = s->first_page + pages;
    tail->pages = s->pages - pages;
    tail->small_arena = s->small_arena;
    for (std::size_t i = 0; i < tail->pages; ++i) set_pagemap(tail->first_page + i, tail);
    s->pages = pages;
    g_stats.large -= tail->bytes();
    free_locked(tail);
  } else if (pages > s->pages) {  // grow into the free span right after, if it is big enough
    span* after = span_of(s->start() + s->bytes());
    if (after == nullptr || after->kind != span::state::free ||
        after->small_arena != s->small_arena || s->pages + after->pages < pages)
      return false;
    const std::size_t need = pages - s->pages;
    remove_free(after);
    for (std::size_t i = 0; i < need; ++i) set_pagemap(after->first_page + i, s);
    if (after->pages > need) {
      after->first_page += need;  // the rest stays free; its pagemap entries already say so
      after->pages -= need;
      insert_free(after);
    } else {
      delete_span(after);
    }
    s->pages = pages;
    g_stats.large += need << kPageShift;
  }
  s->requested_bytes = bytes;
  return true;
}

std::size_t page_heap_t::release(std::size_t keep_bytes) {
  locked l;
  return release_locked(keep_bytes, INT64_MAX);
}

std::size_t page_heap_t::release_older_than(std::int64_t cutoff_ns) {
  locked l;
  return release_locked(0, cutoff_ns);
}

std::size_t page_heap_t::free_bound() {
  locked l;
  return free_bound_locked();
}

// Releases backed free spans freed before `older_than_ns` until at most `keep_bytes` stay
// backed. First the spans to release, largest lists first, are taken off the lists onto a chain
// (each list walked once); then each is returned to the kernel and joins its released
// neighbours. A span still on the chain is backed, so no released span merges with it.
std::size_t page_heap_t::release_locked(std::size_t keep_bytes, std::int64_t older_than_ns) {
  span* chain = nullptr;
  auto take_backed = [&](span** list) {
    for (span* s = *list; s != nullptr && g_stats.free > keep_bytes;) {
      span* next = s->next;
      if (!s->released && s->freed_ns < older_than_ns) {
        remove_free(s);
        s->next = chain;
        chain = s;
      }
      s = next;
    }
  };
  for (int a : {kLargeArena, kSmallArena}) take_backed(&g_free_long[a]);
  for (std::size_t n = kExactLists; n >= 1 && g_stats.free > keep_bytes; --n)
    for (int a : {kLargeArena, kSmallArena}) take_backed(&g_free_exact[a][n]);
  std::size_t released = 0;
  while (span* s = chain) {
    chain = s->next;
    s->next = nullptr;
    madvise(s->start(), s->bytes(), MADV_DONTNEED);
    s->released = true;
    released += s->bytes();
    insert_free(merge_neighbours(s));
  }
  return released;
}

page_heap_stats page_heap_t::stats() {
  locked l;
  return g_stats;
}

}  // namespace percpu::malloc_impl
