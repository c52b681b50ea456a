// percpu malloc's page heap: regions mapped from the kernel, carved into spans, free spans
// coalesced and kept in lists by size, memory returned with madvise, and a pagemap (a two-level
// radix tree over page numbers) from any address to its span. All state is zero-initialized at
// load, so it works before any constructor runs; nothing here calls malloc.
#include "percpu/malloc/page_heap.h"

#include "percpu/malloc/reentrancy.h"

#include <pthread.h>
#include <sys/mman.h>

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

pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;

// Guarded by g_lock:
span* g_free_exact[kExactLists + 1];  // by pages, doubly linked
span* g_free_long;                    // longer than kExactLists pages
span* g_spare_spans;                  // recycled span structs
char* g_meta_next;                    // bump pointer of the current metadata block
char* g_meta_end;
void* g_meta_free[21];  // recycled metadata blocks by log2 size (16 B .. 1 MiB)
page_heap_stats g_stats;

// The heap's lock, counted for signal handlers (reentrancy.h).
class locked : counted_lock {
 public:
  locked() : counted_lock(&g_lock) {}
};

// Maps `bytes` aligned on a page of the page heap (mmap aligns on the kernel's 4 KiB page).
char* map_aligned(std::size_t bytes) {
  void* raw = mmap(nullptr, bytes + kPageSize, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  const auto start = reinterpret_cast<std::uintptr_t>(raw);
  const std::uintptr_t aligned = (start + kPageSize - 1) & ~(kPageSize - 1);
  if (aligned > start) munmap(raw, aligned - start);
  const std::uintptr_t end = start + bytes + kPageSize;
  if (end > aligned + bytes)
    munmap(reinterpret_cast<void*>(aligned + bytes), end - (aligned + bytes));
  return reinterpret_cast<char*>(aligned);
}

unsigned log2_bucket(std::size_t bytes) {
  unsigned b = 4;  // 16 bytes
  while ((std::size_t{1} << b) < bytes) ++b;
  return b;
}

}  // namespace

page_heap_t g_page_heap;  // stateless: the state is above, zero-initialized
std::atomic<std::atomic<span*>*> pagemap::g_root[pagemap::kRootEntries];

void page_heap_t::lock() noexcept {
  pthread_mutex_lock(&g_lock);
}
void page_heap_t::unlock() noexcept {
  pthread_mutex_unlock(&g_lock);
}

void page_heap_t::set_pagemap(std::uintptr_t page, span* s) {
  const std::uintptr_t root = page >> kLeafBits;
  if (root >= pagemap::kRootEntries) return;  // above the pagemap: callers see span_of() fail
  std::atomic<span*>* leaf = g_root[root].load(std::memory_order_relaxed);
  if (leaf == nullptr) {
    void* m = mmap(nullptr, kLeafEntries * sizeof(std::atomic<span*>), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) return;  // callers map leaves before they need them (grow, map_large)
    leaf = static_cast<std::atomic<span*>*>(m);
    g_stats.metadata += kLeafEntries * sizeof(std::atomic<span*>);
    g_root[root].store(leaf, std::memory_order_release);
  }
  leaf[page & (kLeafEntries - 1)].store(s, std::memory_order_release);
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
  span** list = s->pages <= kExactLists ? &g_free_exact[s->pages] : &g_free_long;
  s->prev = nullptr;
  s->next = *list;
  if (*list != nullptr) (*list)->prev = s;
  *list = s;
  (s->released ? g_stats.released : g_stats.free) += s->bytes();
}

void page_heap_t::remove_free(span* s) {
  span** list = s->pages <= kExactLists ? &g_free_exact[s->pages] : &g_free_long;
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
span* page_heap_t::span_for_mapping(char* base, std::size_t pages, span::state kind) {
  span* s = new_span();
  if (s == nullptr) {
    munmap(base, pages << kPageShift);
    return nullptr;
  }
  s->first_page = reinterpret_cast<std::uintptr_t>(base) >> kPageShift;
  s->pages = pages;
  s->kind = kind;
  return s;
}

// Maps a new region of at least `pages` pages as one free span (released: never touched).
span* page_heap_t::grow(std::size_t pages) {
  const std::size_t n = pages > kRegionPages ? pages : kRegionPages;
  char* base = map_aligned(n << kPageShift);
  if (base == nullptr) return nullptr;
  span* s = span_for_mapping(base, n, span::state::free);
  if (s == nullptr) return nullptr;
  s->released = true;
  for (std::size_t i = 0; i < n; ++i) set_pagemap(s->first_page + i, s);
  if (span_of(base) != s || span_of(base + ((n - 1) << kPageShift)) != s) {
    munmap(base, n << kPageShift);  // no memory for a pagemap leaf
    delete_span(s);
    return nullptr;
  }
  g_stats.mapped += n << kPageShift;
  insert_free(s);
  return s;
}

span* page_heap_t::allocate_span(std::size_t pages) {
  if (pages == 0) return nullptr;
  locked l;
  span* s = nullptr;
  for (std::size_t n = pages; n <= kExactLists && s == nullptr; ++n) s = g_free_exact[n];
  if (s == nullptr) {
    for (span* c = g_free_long; c != nullptr; c = c->next)  // best fit among the long ones
      if (c->pages >= pages && (s == nullptr || c->pages < s->pages)) s = c;
  }
  if (s == nullptr) s = grow(pages);
  if (s == nullptr) return nullptr;
  remove_free(s);
  if (s->pages > pages) {
    span* rest = new_span();
    if (rest == nullptr) {
      insert_free(s);
      return nullptr;
    }
    rest->first_page = s->first_page + pages;
    rest->pages = s->pages - pages;
    rest->kind = span::state::free;
    rest->released = s->released;
    for (std::size_t i = 0; i < rest->pages; ++i) set_pagemap(rest->first_page + i, rest);
    s->pages = pages;
    insert_free(rest);
  }
  s->kind = span::state::small;
  g_stats.in_use += s->bytes();
  return s;
}

// Makes `a` and `b` (free, about to merge) agree on being released: when one is released, the
// other's memory is returned too, so a merged span is wholly backed or wholly released (as
// tcmalloc's page heap does), and the statistics stay exact.
static void match_release(span* a, span* b) {
  if (a->released == b->released) return;
  span* backed = a->released ? b : a;
  madvise(backed->start(), backed->bytes(), MADV_DONTNEED);
  backed->released = true;
}

void page_heap_t::free_span(span* s) {
  locked l;
  g_stats.in_use -= s->bytes();
  s->kind = span::state::free;
  s->size_class = 0;
  s->free_objects = nullptr;
  s->allocated = s->carved = 0;
  s->live = nullptr;
  s->released = false;
  // Coalesce with free neighbours (the pagemap knows them).
  if (span* before = span_of(s->start() - 1);
      before != nullptr && before->kind == span::state::free) {
    remove_free(before);
    match_release(before, s);
    before->pages += s->pages;
    for (std::size_t i = 0; i < s->pages; ++i) set_pagemap(s->first_page + i, before);
    delete_span(s);
    s = before;
  }
  if (span* after = span_of(s->start() + s->bytes());
      after != nullptr && after->kind == span::state::free) {
    remove_free(after);
    match_release(s, after);
    for (std::size_t i = 0; i < after->pages; ++i) set_pagemap(after->first_page + i, s);
    s->pages += after->pages;
    delete_span(after);
  }
  insert_free(s);
}

span* page_heap_t::map_large(std::size_t bytes, std::size_t alignment) {
  constexpr std::size_t kMaxBytes = std::size_t{1} << 46;
  if (alignment < kPageSize) alignment = kPageSize;
  // The mapping keeps the room it needed to align the pointer: an absurd alignment would
  // reserve (and count) that much address space.
  if (bytes == 0 || bytes > kMaxBytes || alignment > kMaxLargeAlignment) return nullptr;
  const std::size_t extra = alignment - kPageSize;  // room to move the user pointer up
  const std::size_t pages = (bytes + extra + kPageSize - 1) >> kPageShift;
  char* base = map_aligned(pages << kPageShift);
  if (base == nullptr) return nullptr;
  const auto user = (reinterpret_cast<std::uintptr_t>(base) + alignment - 1) & ~(alignment - 1);
  locked l;
  span* s = span_for_mapping(base, pages, span::state::large);
  if (s == nullptr) return nullptr;
  s->requested_bytes = bytes;
  s->offset = user - reinterpret_cast<std::uintptr_t>(base);
  set_pagemap(user >> kPageShift, s);
  if (span_of(reinterpret_cast<void*>(user)) != s) {  // no memory for the pagemap leaf
    munmap(base, pages << kPageShift);
    delete_span(s);
    return nullptr;
  }
  g_stats.large += s->bytes();
  return s;
}

bool page_heap_t::unmap_large(const void* p) {
  locked l;
  span* s = span_of(p);
  if (s == nullptr || s->kind != span::state::large || s->start() + s->offset != p) return false;
  set_pagemap(reinterpret_cast<std::uintptr_t>(p) >> kPageShift, nullptr);
  munmap(s->start(), s->bytes());
  g_stats.large -= s->bytes();
  delete_span(s);
  return true;
}

std::size_t page_heap_t::release(std::size_t keep_bytes) {
  locked l;
  std::size_t released = 0;
  auto release_list = [&](span* list) {
    for (span* s = list; s != nullptr && g_stats.free > keep_bytes; s = s->next) {
      if (s->released) continue;
      madvise(s->start(), s->bytes(), MADV_DONTNEED);
      g_stats.free -= s->bytes();
      g_stats.released += s->bytes();
      s->released = true;
      released += s->bytes();
    }
  };
  release_list(g_free_long);  // largest spans first
  for (std::size_t n = kExactLists; n >= 1 && g_stats.free > keep_bytes; --n)
    release_list(g_free_exact[n]);
  return released;
}

page_heap_stats page_heap_t::stats() {
  locked l;
  return g_stats;
}

}  // namespace percpu::malloc_impl
