// The per-CPU structures with their slots taken from a pool: same behaviour, and memory that
// follows the pool's layout (many structures share each index's pages).
#include <gtest/gtest.h>

#include <percpu/percpu.h>
#include <thread>
#include <vector>

#include "modes.h"
#include "pin.h"

namespace {

using percpu::index_mode;

template <class T>
class PoolStructures : public ::testing::Test {};
TYPED_TEST_SUITE(PoolStructures, percpu::test::Modes);

struct item {
  item* next = nullptr;
};

struct record {
  std::int64_t a, b;
};

TYPED_TEST(PoolStructures, EveryStructureWorksOnPoolSlots) {
  constexpr index_mode M = TypeParam::value;
  percpu::pool<M> pool(percpu::pool_options{.debug = false});
  {
    percpu::counter<std::int64_t, M> c(pool);
    percpu::freelist<item, &item::next, M, false> list(pool);
    percpu::spinlock<M> lock(pool);
    percpu::buffer<item*, M, false> buf(16, pool);
    percpu::memcpy_buffer<record, M> records(8, pool);
    EXPECT_EQ(pool.stats().live_objects, 5u);

    std::vector<std::thread> threads;
    std::vector<item> items(4);
    for (int t = 0; t < 4; ++t)
      threads.emplace_back([&, t] {
        for (int i = 0; i < 10000; ++i) c.add(1);
        list.push(&items[t]);
        const int index = lock.lock();
        lock.unlock(index);
      });
    for (auto& th : threads) th.join();
    EXPECT_EQ(c.load(), 40000);
    int popped = 0;
    for (int i = 0; i < list.slots(); ++i)
      for (item* p = list.drain(i); p; p = p->next) ++popped;
    EXPECT_EQ(popped, 4);
    // A pop reads the buffer of the index it runs on: the push's, unless the thread migrates
    // between the two (seen once on a loaded 2-CPU VM).
    percpu::test::pinned on_one_cpu(sched_getcpu());
    EXPECT_TRUE(buf.push(&items[0]));
    EXPECT_EQ(buf.pop(), &items[0]);
    EXPECT_TRUE(records.push(record{1, 2}));
    record r{};
    EXPECT_TRUE(records.pop(r));
    EXPECT_EQ(r.b, 2);
  }
  EXPECT_EQ(pool.stats().live_objects, 0u);  // every structure gave its slots back
}

// The fast paths' layout dispatch (slot_array::with_table): slots of their own mapping lie one
// cache line apart and are reached with a constant shift; slots from a pool lie the pool's stride
// apart and are reached with a multiply. Both tables address the same slots operator[] does.
TYPED_TEST(PoolStructures, FastPathsAddressPoolSlotsAndOwnSlotsAlike) {
  constexpr auto M = TypeParam::value;
  percpu::pool<M> pool;
  percpu::slot_array<std::intptr_t> own(percpu::index_space<M>());
  percpu::slot_array<std::intptr_t> pooled(percpu::index_space<M>(), pool);
  for (auto* a : {&own, &pooled}) {
    const bool from_pool = a == &pooled;
    a->with_table([&](percpu::arch::slot_table t, auto shift) {
      if (from_pool) {
        EXPECT_EQ(decltype(shift)::value, 0u);
        EXPECT_EQ(t.stride, pool.stride());
      } else {
        EXPECT_EQ(std::uintptr_t{1} << decltype(shift)::value, std::uintptr_t{64});
        EXPECT_EQ(t.stride, 64u);
      }
      for (int i = 0; i < a->size(); ++i) EXPECT_EQ(t.words(i), &(*a)[i]) << "index " << i;
      return 0;
    });
  }
  // And through a structure: counters of both layouts, interleaved in one loop.
  percpu::counter<std::int64_t, M> mine;
  percpu::counter<std::int64_t, M> shared(pool);
  for (int k = 0; k < 10000; ++k) {
    mine.add(1);
    shared.add(2);
  }
  EXPECT_EQ(mine.load(), 10000);
  EXPECT_EQ(shared.load(), 20000);
}

TYPED_TEST(PoolStructures, TooSmallAPoolIsRefused) {
  constexpr index_mode M = TypeParam::value;
  percpu::pool<M> pool(percpu::pool_options{.stride = 4096, .debug = false});
  EXPECT_THROW((percpu::buffer<item*, M, false>(4096, pool)), std::invalid_argument);  // 32 KiB
  EXPECT_EQ(pool.stats().live_objects, 0u);
}

// 10,000 counters used on one CPU of a pool laid out for 256 CPUs cost about their 8 bytes each;
// with slots of their own they would cost a page each.
TEST(PoolStructuresMemory, ManyCountersShareTheirPages) {
  percpu::test::pinned pin(0);
  percpu::pool<index_mode::cpu_id> pool(percpu::pool_options{.slots = 256, .debug = false});
  std::vector<std::unique_ptr<percpu::counter<std::int64_t>>> counters;
  for (int i = 0; i < 10000; ++i) {
    counters.push_back(std::make_unique<percpu::counter<std::int64_t>>(pool));
    counters.back()->add(1);
  }
  const auto s = pool.stats();
  EXPECT_LE(s.resident_bytes, 10000u * 8 + (64u << 10));
  EXPECT_EQ(s.live_objects, 10000u);
}

}  // namespace
