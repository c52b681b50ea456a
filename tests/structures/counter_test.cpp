#include <gtest/gtest.h>

#include <percpu/counter.h>
#include <atomic>
#include <thread>
#include <vector>

#include "modes.h"

namespace {

template <class T>
class Counter : public ::testing::Test {};
TYPED_TEST_SUITE(Counter, percpu::test::Modes);

TYPED_TEST(Counter, AddSubLoad) {
  percpu::counter<std::int64_t, TypeParam::value> c;
  EXPECT_EQ(c.load(), 0);
  c.add(5);
  c.sub(7);
  EXPECT_EQ(c.load(), -2);
  EXPECT_EQ(c.slots(), percpu::index_space<TypeParam::value>());
}

TYPED_TEST(Counter, SlotRejectsIndicesOutsideTheSpace) {
  percpu::counter<std::uint32_t, TypeParam::value> c;
  c.add(3);
  EXPECT_THROW(c.slot(-1), std::out_of_range);
  EXPECT_THROW(c.slot(c.slots()), std::out_of_range);
  std::uint32_t sum = 0;
  for (int i = 0; i < c.slots(); ++i) sum += c.slot(i);
  EXPECT_EQ(sum, 3u);
  EXPECT_EQ(c.load(), 3u);  // nothing lost by the bad calls
}

TYPED_TEST(Counter, ConcurrentAddsAndResetsLoseNothing) {
  percpu::counter<std::int64_t, TypeParam::value> c;
  constexpr int kThreads = 6;
  constexpr long kAdds = 300000;
  std::atomic<bool> stop{false};
  std::int64_t taken = 0;
  std::thread resetter([&] {
    while (!stop.load()) taken += c.reset();
  });
  std::vector<std::thread> pool;
  for (int t = 0; t < kThreads; ++t)
    pool.emplace_back([&] {
      for (long i = 0; i < kAdds; ++i) c.add(1);
    });
  for (auto& th : pool) th.join();
  stop = true;
  resetter.join();
  EXPECT_EQ(taken + c.load(), kThreads * kAdds);
}

}  // namespace
