// percpu malloc's page heap: spans are found from any of their pages, free spans coalesce,
// large mappings come and go, and free memory is returned to the kernel. The heap is
// process-wide, so the checks are on deltas and on the spans each test owns.
#include <gtest/gtest.h>

#include <sys/mman.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>
#include "malloc/page_heap.h"

namespace {

using namespace percpu::malloc_impl;

TEST(MallocPageHeap, EveryPageOfASpanMapsToIt) {
  page_heap_t& heap = page_heap();
  for (std::size_t pages : {1u, 2u, 7u, 128u, 129u, 3000u}) {
    span* s = heap.allocate_span(pages);
    ASSERT_NE(s, nullptr) << pages;
    EXPECT_EQ(s->pages, pages);
    EXPECT_EQ(s->kind, span::state::small);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(s->start()) % kPageSize, 0u);
    for (std::size_t i = 0; i < pages; ++i) {
      ASSERT_EQ(heap.span_of(s->start() + i * kPageSize), s) << pages << " page " << i;
      ASSERT_EQ(heap.span_of(s->start() + i * kPageSize + kPageSize - 1), s);
    }
    s->start()[0] = 1;  // usable memory
    s->start()[s->bytes() - 1] = 1;
    heap.free_span(s);
  }
  EXPECT_EQ(heap.span_of(nullptr), nullptr);
  int on_stack = 0;
  EXPECT_EQ(heap.span_of(&on_stack), nullptr);
  EXPECT_EQ(heap.span_of(reinterpret_cast<void*>(~std::uintptr_t{0})), nullptr);
}

TEST(MallocPageHeap, FreeNeighboursCoalesce) {
  page_heap_t& heap = page_heap();
  // A long span split into three: freeing them in any order leaves one free span again.
  span* whole = heap.allocate_span(30);
  ASSERT_NE(whole, nullptr);
  char* start = whole->start();
  heap.free_span(whole);
  span* a = heap.allocate_span(10);
  span* b = heap.allocate_span(10);
  span* c = heap.allocate_span(10);
  ASSERT_TRUE(a && b && c);
  ASSERT_EQ(a->start(), start);  // the same pages again, carved in order
  ASSERT_EQ(b->start(), start + 10 * kPageSize);
  ASSERT_EQ(c->start(), start + 20 * kPageSize);
  heap.free_span(b);
  heap.free_span(a);
  heap.free_span(c);
  span* merged = heap.span_of(start);
  ASSERT_NE(merged, nullptr);
  EXPECT_EQ(merged->kind, span::state::free);
  EXPECT_GE(merged->pages, 30u);
  EXPECT_EQ(heap.span_of(start + 29 * kPageSize), merged);
}

TEST(MallocPageHeap, LargeSpansAreFoundInEveryPageAndFreedIntoTheHeap) {
  page_heap_t& heap = page_heap();
  const std::size_t before = heap.stats().large;
  bool zeroed = false;
  span* s = heap.allocate_large(1000000, kPageSize, zeroed);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->kind, span::state::large);
  EXPECT_EQ(s->requested_bytes, 1000000u);
  EXPECT_GE(s->bytes(), 1000000u);
  EXPECT_EQ(heap.span_of(s->start()), s);
  EXPECT_EQ(heap.span_of(s->start() + 999999), s);  // every page: an interior pointer is known
  EXPECT_EQ(heap.stats().large, before + s->bytes());
  char* p = s->start();
  if (zeroed) {
    EXPECT_EQ(p[999999], 0);
  }
  p[999999] = 1;
  EXPECT_FALSE(heap.free_large(p + kPageSize));  // not its user pointer: refused
  EXPECT_TRUE(heap.free_large(p));
  EXPECT_FALSE(heap.free_large(p));  // a second time: refused
  ASSERT_NE(heap.span_of(p), nullptr);
  EXPECT_EQ(heap.span_of(p)->kind, span::state::free);  // kept for reuse, not unmapped
  EXPECT_EQ(heap.stats().large, before);
  EXPECT_EQ(heap.allocate_large(std::size_t{1} << 60, kPageSize, zeroed), nullptr);  // absurd
  // Alignments above a page move the user pointer up.
  span* aligned = heap.allocate_large(300000, std::size_t{1} << 20, zeroed);
  ASSERT_NE(aligned, nullptr);
  char* user = aligned->start() + aligned->offset;
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(user) % (std::size_t{1} << 20), 0u);
  EXPECT_GE(aligned->bytes() - aligned->offset, 300000u);
  EXPECT_EQ(heap.span_of(user), aligned);
  EXPECT_TRUE(heap.free_large(user));
}

TEST(MallocPageHeap, LargeSpansGrowInPlaceIntoTheFreeSpanAfterThemAndShrinkInPlace) {
  page_heap_t& heap = page_heap();
  bool zeroed = false;
  // 64 MiB shrunk in place to 300000 bytes: the rest right after it is a free span.
  span* s = heap.allocate_large(std::size_t{64} << 20, kPageSize, zeroed);
  ASSERT_NE(s, nullptr);
  char* p = s->start() + s->offset;
  ASSERT_TRUE(heap.resize_large(p, 300000));
  EXPECT_EQ(s->bytes(), (300000 + kPageSize - 1) & ~(kPageSize - 1));
  span* rest = heap.span_of(p + s->bytes());
  ASSERT_NE(rest, nullptr);
  EXPECT_EQ(rest->kind, span::state::free);
  p[0] = 42;
  const std::size_t before = heap.stats().large;
  ASSERT_TRUE(heap.resize_large(p, std::size_t{8} << 20));  // grows in place
  EXPECT_EQ(heap.span_of(p), s);
  EXPECT_GE(s->bytes() - s->offset, std::size_t{8} << 20);
  EXPECT_EQ(heap.span_of(p + (std::size_t{8} << 20) - 1), s);
  EXPECT_EQ(heap.stats().large,
            before + s->bytes() - ((300000 + kPageSize - 1) & ~(kPageSize - 1)));
  EXPECT_EQ(p[0], 42);
  ASSERT_TRUE(heap.resize_large(p, 500000));  // shrinks in place: the tail is free again
  EXPECT_LT(s->bytes(), std::size_t{1} << 20);
  span* tail = heap.span_of(p + (std::size_t{2} << 20));
  ASSERT_NE(tail, nullptr);
  EXPECT_EQ(tail->kind, span::state::free);
  EXPECT_FALSE(heap.resize_large(p + kPageSize, 1000));      // not a user pointer: refused
  EXPECT_FALSE(heap.resize_large(p, std::size_t{1} << 50));  // nothing that big after it
  EXPECT_TRUE(heap.free_large(p));
  EXPECT_FALSE(heap.resize_large(p, 1000));  // freed: refused
}

TEST(MallocPageHeap, ReleaseReturnsFreeMemory) {
  page_heap_t& heap = page_heap();
  // No free memory backed before the test, so that its 2 MiB stay within the heap's bound
  // (kFreeBoundFloor) when freed: a free past the bound releases at once.
  heap.release(0);
  // A span between two in-use neighbours stays backed when freed (a span merging with a
  // released neighbour is released at once).
  span* left = heap.allocate_span(5);
  span* s = heap.allocate_span(256);  // 2 MiB
  span* right = heap.allocate_span(5);
  ASSERT_TRUE(left && s && right);
  if (left->start() + left->bytes() != s->start() || s->start() + s->bytes() != right->start())
    GTEST_SKIP() << "the heap did not carve the three spans next to each other";
  std::memset(s->start(), 1, s->bytes());
  heap.free_span(s);
  EXPECT_GE(heap.stats().free, 256 * kPageSize);
  EXPECT_GE(heap.release(0), 256 * kPageSize);
  const page_heap_stats after = heap.stats();
  EXPECT_EQ(after.free, 0u);
  EXPECT_GE(after.released, 256 * kPageSize);
  span* again = heap.allocate_span(256);  // released memory reads as zero
  ASSERT_NE(again, nullptr);
  std::vector<char> zero(again->bytes(), 0);
  EXPECT_EQ(std::memcmp(again->start(), zero.data(), zero.size()), 0);
  heap.free_span(again);
  heap.free_span(left);
  heap.free_span(right);
}

// Backed free memory stays within free_bound() at every free of a small span; a freed large
// block (perhaps resident only where its program wrote) waits for such a free or the decay.
TEST(MallocPageHeap, FreesOfSmallSpansKeepBackedFreeMemoryWithinTheBound) {
  page_heap_t& heap = page_heap();
  heap.release(0);
  std::this_thread::sleep_for(std::chrono::milliseconds(250));  // no recent churn (page_heap.h)
  const std::size_t big = 4 * kFreeBoundFloor;
  bool zeroed = false;
  span* large = heap.allocate_large(big, kPageSize, zeroed);
  span* small = heap.allocate_span(4);
  ASSERT_TRUE(large && small);
  ASSERT_LT(heap.stats().in_use + heap.stats().large, 4 * kFreeBoundFloor + (std::size_t{64} << 20))
      << "this process holds too much memory for the bound to be its floor";
  ASSERT_TRUE(heap.free_large(large->start() + large->offset));
  EXPECT_GE(heap.stats().free, big) << "a large block's free releases nothing";
  heap.free_span(small);
  EXPECT_LE(heap.stats().free, heap.free_bound()) << "a small span's free keeps the bound";
  EXPECT_GE(heap.stats().released_by_bound, big / 2);
}

// The passes' decay: release_older_than() returns the free spans freed before its cutoff and
// keeps the others backed; two free spans joined keep the older free time (so a span a program
// keeps carving from and freeing again still ages).
TEST(MallocPageHeap, DecayReleasesSpansByTheTimeTheyWereFreed) {
  page_heap_t& heap = page_heap();
  heap.release(0);
  span* first = heap.allocate_span(16);
  span* second = heap.allocate_span(16);
  span* guard = heap.allocate_span(1);  // keeps the pair from joining what lies after it
  ASSERT_TRUE(first && second && guard);
  if (first->start() + first->bytes() != second->start())
    GTEST_SKIP() << "the heap did not carve the two spans next to each other";
  char* const start = first->start();
  std::memset(start, 1, 32 * kPageSize);
  heap.free_span(first);
  const std::int64_t first_freed = heap.span_of(start)->freed_ns;
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // past the coarse clock's tick
  heap.free_span(second);
  span* joined = heap.span_of(start);
  ASSERT_EQ(joined->pages, 32u) << "the two free spans joined";
  EXPECT_EQ(joined->freed_ns, first_freed) << "the older free time";
  EXPECT_EQ(heap.release_older_than(first_freed), 0u) << "nothing freed before the cutoff";
  EXPECT_FALSE(heap.span_of(start)->released);
  EXPECT_GE(heap.release_older_than(first_freed + 1), 32 * kPageSize);
  EXPECT_TRUE(heap.span_of(start)->released);
  heap.free_span(guard);
}

TEST(MallocPageHeap, AFreedSpanStaysResidentBesideReleasedOnesUntilItIsReleasedToo) {
  // Merging a freed (resident) span into a released neighbour would return its memory to the
  // kernel, and its next user would fault on every page: the two stay apart until the decay
  // releases the freed one, which then joins its released neighbours.
  page_heap_t& heap = page_heap();
  heap.release(0);  // every free span is released now
  span* s = heap.allocate_span(64);
  ASSERT_NE(s, nullptr);
  std::memset(s->start(), 1, s->bytes());
  char* const start = s->start();
  const std::size_t free_before = heap.stats().free;
  heap.free_span(s);
  span* freed = heap.span_of(start);
  ASSERT_NE(freed, nullptr);
  EXPECT_EQ(freed->kind, span::state::free);
  EXPECT_FALSE(freed->released);
  EXPECT_EQ(freed->pages, 64u);  // not merged with a released neighbour
  EXPECT_EQ(heap.stats().free, free_before + 64 * kPageSize);
  EXPECT_GE(heap.release(0), 64 * kPageSize);
  span* joined = heap.span_of(start);
  ASSERT_NE(joined, nullptr);
  EXPECT_TRUE(joined->released);
  EXPECT_EQ(heap.stats().free, 0u);
  // Its neighbours, when free, are released too now, and joined with it.
  span* after = heap.span_of(joined->start() + joined->bytes());
  if (after != nullptr) {
    EXPECT_NE(after->kind, span::state::free);
  }
}

// The VmFlags line of /proc/self/smaps for the mapping holding `p` ("" when none does).
std::string vm_flags_of(const void* p) {
  std::ifstream smaps("/proc/self/smaps");
  const auto addr = reinterpret_cast<std::uintptr_t>(p);
  bool inside = false;
  for (std::string line; std::getline(smaps, line);) {
    unsigned long lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &lo, &hi) == 2) {  // a mapping's first line
      inside = lo <= addr && addr < hi;
    } else if (inside && line.rfind("VmFlags:", 0) == 0) {
      return line + " ";
    }
  }
  return "";
}

// Small spans and large blocks come from separate arenas: once 32 MiB of small spans are in use
// (and 7/8 of their arena) its regions (all of them, the first ones too) carry MADV_HUGEPAGE,
// until the use falls below 3/4 of the arena; large blocks' regions never do.
TEST(MallocPageHeap, SmallSpansGetHugePageAdviceWhileTheirArenaIsBigAndLargeBlocksNever) {
  {
    void* probe =
        mmap(nullptr, 4 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(probe, MAP_FAILED);
    const bool recorded = madvise(probe, 4 << 20, MADV_HUGEPAGE) == 0 &&
                          vm_flags_of(probe).find(" hg ") != std::string::npos;
    munmap(probe, 4 << 20);
    if (!recorded) GTEST_SKIP() << "this kernel (or emulator) keeps no huge page advice";
  }
  page_heap_t& heap = page_heap();
  // The heap is the process's (other tests, or the whole binary under the preload, may have
  // left free spans in the arena): 2 MiB spans are taken until the advice is on, at 32 MiB in
  // use and 7/8 of the arena: within 256 MiB unless 36 MiB of it is free in pieces under 2 MiB.
  span* first = heap.allocate_span(1);
  ASSERT_NE(first, nullptr);
  std::vector<span*> spans;
  while (!heap.stats().huge_advice && spans.size() < 128) {
    span* s = heap.allocate_span(256);
    ASSERT_NE(s, nullptr);
    spans.push_back(s);
  }
  ASSERT_TRUE(heap.stats().huge_advice)
      << heap.stats().in_use << " bytes in use of a small arena of " << heap.stats().small_arena;
  EXPECT_GE(heap.stats().in_use, std::size_t{32} << 20);
  bool zeroed = false;
  span* large = heap.allocate_large(std::size_t{4} << 20, kPageSize, zeroed);
  ASSERT_NE(large, nullptr);
  EXPECT_NE(vm_flags_of(first->start()).find(" hg "), std::string::npos) << "the first region";
  for (span* s : spans) {
    EXPECT_TRUE(s->small_arena);
    EXPECT_NE(vm_flags_of(s->start()).find(" hg "), std::string::npos);
  }
  EXPECT_FALSE(large->small_arena);
  EXPECT_EQ(vm_flags_of(large->start()).find(" hg "), std::string::npos);
  EXPECT_NE(vm_flags_of(large->start()), "") << "the large block's mapping is listed";
  EXPECT_TRUE(heap.free_large(large->start() + large->offset));
  char* const start = spans.front()->start();
  for (span* s : spans) heap.free_span(s);
  EXPECT_FALSE(heap.stats().huge_advice) << "withdrawn once the arena is mostly free";
  EXPECT_EQ(vm_flags_of(start).find(" hg "), std::string::npos);
  EXPECT_NE(vm_flags_of(start).find(" nh "), std::string::npos);
  heap.free_span(first);
}

TEST(MallocPageHeap, MetadataIsZeroedAndRecycled) {
  page_heap_t& heap = page_heap();
  auto* p = static_cast<unsigned char*>(heap.metadata_alloc(100));
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % 16, 0u);
  for (int i = 0; i < 100; ++i) ASSERT_EQ(p[i], 0);
  std::memset(p, 0xff, 100);
  heap.metadata_free(p, 100);
  auto* q = static_cast<unsigned char*>(heap.metadata_alloc(128));
  EXPECT_EQ(q, p);  // same bucket, recycled
  for (int i = 0; i < 128; ++i) ASSERT_EQ(q[i], 0);
  heap.metadata_free(q, 128);
  EXPECT_EQ(heap.metadata_alloc((std::size_t{1} << 20) + 1), nullptr);
}

}  // namespace
