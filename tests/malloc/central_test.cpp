// percpu malloc's middle end: objects come from spans of their class, are distinct and aligned,
// go back to their spans (an emptied span returns to the page heap), and whole batches stop in
// the transfer cache.
#include <gtest/gtest.h>

#include <cstring>
#include <set>
#include <thread>
#include <vector>
#include "malloc/central.h"

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
      std::memset(p, 0x5a, info.size);
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
        for (void* p : held)
          if (static_cast<std::uint64_t*>(p)[1] != static_cast<std::uint64_t>(t + 1))
            shared.fetch_add(1);
        central_insert(cls, held.data(), n);
        held.clear();
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(shared.load(), 0);
}

}  // namespace

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
