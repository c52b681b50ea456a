// percpu malloc's middle end: objects come from spans of their class, are distinct and aligned,
// go back to their spans (an emptied span returns to the page heap), and whole batches stop in
// the transfer cache.
#include <gtest/gtest.h>

#include <cstring>
#include <set>
#include <thread>
#include <vector>
#include "malloc/central.h"
#include "malloc/free_tag.h"

namespace {

using namespace percpu::malloc_impl;

TEST(MallocCentral, ObjectsComeFromSpansOfTheirClassAndGoBack) {
  for (std::size_t cls : {std::size_t{1}, std::size_t{3}, size_class_of(1000), size_class_of(20000),
                          kClassCount - 1}) {
    const size_class_info& info = kClasses[cls];
    const std::size_t n = info.batch > 2 ? info.batch - 1 : 1;  // not a whole batch: to spans
    const central_stats before = central_stats_of(cls);
    std::vector<void*> objects(n);
    ASSERT_EQ(central_remove(cls, objects.data(), n), n);
    std::set<void*> distinct(objects.begin(), objects.end());
    EXPECT_EQ(distinct.size(), n);
    for (void* p : objects) {
      EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % kAlignment, 0u);
      span* s = page_heap().span_of(p);
      ASSERT_NE(s, nullptr);
      EXPECT_EQ(s->size_class, cls);
      const auto offset = static_cast<std::uint64_t>(static_cast<char*>(p) - s->start());
      EXPECT_TRUE(is_object_start(cls, offset));
      EXPECT_FALSE(is_object_start(cls, offset + 8));  // interior
      EXPECT_EQ(free_tag_word(p), cached_tag_of(p));   // out with the cached tag
      std::memset(p, 0x5a, info.size);
      free_tag_word(p) = cached_tag_of(p);  // as free() writes it
    }
    central_insert(cls, objects.data(), n);
    EXPECT_EQ(central_stats_of(cls).spans, before.spans) << "class " << cls;
  }
}

TEST(MallocCentral, WholeBatchesStopInTheTransferCache) {
  const std::size_t cls = size_class_of(64);
  const std::size_t batch = kClasses[cls].batch;
  std::vector<void*> objects(batch);
  ASSERT_EQ(central_remove(cls, objects.data(), batch), batch);
  const std::size_t before = central_stats_of(cls).transfer_objects;
  central_insert(cls, objects.data(), batch);
  EXPECT_EQ(central_stats_of(cls).transfer_objects, before + batch);
  std::vector<void*> again(batch);
  ASSERT_EQ(central_remove(cls, again.data(), batch), batch);
  EXPECT_EQ(std::set<void*>(again.begin(), again.end()),
            std::set<void*>(objects.begin(), objects.end()));
  central_insert(cls, again.data(), batch);
}

// Threads take and return batches of one class: nobody ever holds an object another holds.
TEST(MallocCentral, ConcurrentBatchesNeverShareAnObject) {
  const std::size_t cls = size_class_of(32);
  const std::size_t batch = kClasses[cls].batch;
  std::atomic<int> shared{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      std::vector<void*> held;
      for (int round = 0; round < 2000; ++round) {
        std::vector<void*> got(batch);
        const std::size_t n = central_remove(cls, got.data(), round % 3 == 0 ? batch - 1 : batch);
        for (std::size_t i = 0; i < n; ++i) {
          auto* word = static_cast<std::uint64_t*>(got[i]);
          *word = static_cast<std::uint64_t>(t + 1);  // the link is ours to overwrite now
          word[1] = static_cast<std::uint64_t>(t + 1);
          held.push_back(got[i]);
        }
        std::this_thread::yield();
        for (void* p : held) {
          if (static_cast<std::uint64_t*>(p)[1] != static_cast<std::uint64_t>(t + 1))
            shared.fetch_add(1);
          free_tag_word(p) = cached_tag_of(p);  // as free() writes it
        }
        central_insert(cls, held.data(), n);
        held.clear();
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(shared.load(), 0);
}

}  // namespace

// Each move between the caches and the spans checks the object's tag (free_tag.h): an object
// returned to its span twice, one overwritten while free in its span, a span whose count
// reaches 0 (a stray free counted twice) while a user holds one of its objects, and an object
// returned to a span of another class stop the process, naming it.
namespace {

// Every object of one span of class `cls`, all taken from the central lists (the span is full).
std::vector<void*> whole_span(std::size_t cls) {
  const size_class_info& info = kClasses[cls];
  std::vector<void*> all(4 * info.objects_per_span());
  const std::size_t n = central_remove(cls, all.data(), all.size());
  const span* s = page_heap().span_of(all[n - 1]);
  std::vector<void*> mine;
  for (std::size_t i = 0; i < n; ++i)
    if (page_heap().span_of(all[i]) == s) mine.push_back(all[i]);
  if (mine.size() != info.objects_per_span() || s->allocated != mine.size()) std::abort();
  return mine;
}

}  // namespace

TEST(MallocCentralDeathTest, MovesCheckTheFreeTags) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const std::size_t cls = size_class_of(4096);
  EXPECT_DEATH(
      {
        std::vector<void*> mine = whole_span(cls);
        central_insert(cls, &mine[0], 1);
        central_insert(cls, &mine[0], 1);
      },
      "percpu malloc: free\\(\\): double free, or a pointer that is not allocated \\(an object "
      "returned to its span");
  EXPECT_DEATH(
      {
        std::vector<void*> mine = whole_span(cls);
        central_insert(cls, &mine[0], 1);  // its span, full before, is first in the list now
        std::memset(mine[0], 0x5a, 16);    // a write after free
        void* again = nullptr;
        central_remove(cls, &again, 1);
      },
      "percpu malloc: malloc\\(\\): an object free in its span has lost its free tag \\(.*\\) "
      "\\(0x[0-9a-f]+\\)");
  EXPECT_DEATH(
      {
        // All back but one, which a user holds; then a stray free of one already back: its
        // span's bitmap has it free already.
        std::vector<void*> mine = whole_span(cls);
        for (std::size_t i = 1; i < mine.size(); ++i) central_insert(cls, &mine[i], 1);
        std::memset(mine[0], 0, 16);
        free_tag_word(mine[1]) = cached_tag_of(mine[1]);  // free() of it again
        central_insert(cls, &mine[1], 1);
      },
      "percpu malloc: free\\(\\): double free \\(an object returned to its span twice\\) "
      "\\(0x[0-9a-f]+\\)");
  EXPECT_DEATH(
      {
        // A stray free of an object its user still holds (a free of a dangling pointer to it)
        // sends it home; the user writes on; the span's last object comes back.
        std::vector<void*> mine = whole_span(cls);
        for (std::size_t i = 1; i + 1 < mine.size(); ++i) central_insert(cls, &mine[i], 1);
        free_tag_word(mine[0]) = cached_tag_of(mine[0]);  // the stray free()
        central_insert(cls, &mine[0], 1);
        std::memset(mine[0], 0, 16);  // its user's write
        central_insert(cls, &mine.back(), 1);
      },
      "percpu malloc: free\\(\\): a span emptied while this object of it is not free \\(.*\\) "
      "\\(0x[0-9a-f]+\\)");
  // A stale copy of an object (its span gone, its pages another class's now) is not linked
  // into the other class's span.
  EXPECT_DEATH(
      {
        void* p = nullptr;
        if (central_remove(size_class_of(1024), &p, 1) != 1) std::abort();
        central_insert(cls, &p, 1);
      },
      "percpu malloc: free\\(\\): double free, or a pointer that is not allocated \\(a cached "
      "object whose span is gone\\) \\(0x[0-9a-f]+\\)");
}

TEST(MallocCentral, TransferCachesDecayByHalfAPass) {
  constexpr std::size_t cls = 20;
  const std::size_t batch = kClasses[cls].batch;
  std::vector<void*> objects(4 * batch);
  for (std::size_t k = 0; k < 4; ++k)
    ASSERT_EQ(central_remove(cls, objects.data() + k * batch, batch), batch);
  const std::size_t before = central_stats_of(cls).transfer_objects;
  for (std::size_t k = 0; k < 4; ++k) central_insert(cls, objects.data() + k * batch, batch);
  const std::size_t parked = central_stats_of(cls).transfer_objects - before;
  EXPECT_EQ(parked, 4 * batch);
  const std::size_t total = before + parked;
  EXPECT_EQ(central_release_transfer(cls), (total / batch - total / batch / 2) * batch);
  EXPECT_EQ(central_stats_of(cls).transfer_objects, total / batch / 2 * batch);
}
