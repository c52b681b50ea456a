#include <gtest/gtest.h>

#include <percpu/ops.h>
#include <percpu/pool.h>
#include <atomic>
#include <climits>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <set>
#include <thread>
#include <vector>

#include "modes.h"
#include "pin.h"

namespace {

using percpu::index_mode;

template <class T>
class Pool : public ::testing::Test {};
TYPED_TEST_SUITE(Pool, percpu::test::Modes);

struct pair {
  std::int64_t a, b;
};

TYPED_TEST(Pool, SlotsAreStridedAndStartZeroed) {
  percpu::pool<TypeParam::value> pool;
  auto p = pool.template allocate<pair>();
  ASSERT_TRUE(p);
  EXPECT_EQ(p.slots(), percpu::index_space<TypeParam::value>());
  for (int i = 0; i < p.slots(); ++i) {
    EXPECT_EQ(reinterpret_cast<char*>(&p[i]) - reinterpret_cast<char*>(&p[0]),
              static_cast<std::ptrdiff_t>(i * pool.stride()));
    EXPECT_EQ(p.at(i).a, 0);
    EXPECT_EQ(p.at(i).b, 0);
  }
  EXPECT_THROW(p.at(-1), std::out_of_range);
  EXPECT_THROW(p.at(p.slots()), std::out_of_range);
  int n = 0;
  for (pair& slot : p) {
    slot.a = ++n;
  }
  EXPECT_EQ(n, p.slots());
  EXPECT_EQ(p[p.slots() - 1].a, n);
  pool.free(p);
  EXPECT_FALSE(p);
}

TYPED_TEST(Pool, InitValueIsInEverySlot) {
  percpu::pool<TypeParam::value> pool;
  auto p = pool.template allocate<pair>(pair{7, -7});
  for (const pair& slot : p) {
    EXPECT_EQ(slot.a, 7);
    EXPECT_EQ(slot.b, -7);
  }
  pool.free(p);
}

// A freed object comes back zeroed: at once in debug mode (no caches), and in cached mode once
// enough freed objects wait to be cleared in one batch, or carving reaches the end of a chunk.
// Pinned, so
// that the free and the refill use the same CPU's caches.
TYPED_TEST(Pool, FreedObjectsAreReusedZeroed) {
  percpu::test::pinned pin(0);
  for (bool debug : {false, true}) {
    percpu::pool<TypeParam::value> pool(percpu::pool_options{.debug = debug});
    auto p = pool.template allocate<pair>();
    void* first = &p[0];
    for (pair& slot : p) slot = pair{1, 2};
    pool.free(p);
    std::vector<percpu::percpu_ptr<pair, TypeParam::value>> live;
    bool reused = false;
    for (std::size_t n = 0; n < 2 * pool.stride() / sizeof(pair) && !reused; ++n) {
      live.push_back(pool.template allocate<pair>());
      reused = static_cast<void*>(&live.back()[0]) == first;
      for (const pair& slot : live.back()) {
        ASSERT_EQ(slot.a, 0) << "debug " << debug;
        ASSERT_EQ(slot.b, 0) << "debug " << debug;
      }
    }
    EXPECT_TRUE(reused) << "debug " << debug;
    if (debug) {
      EXPECT_EQ(live.size(), 1u);  // debug mode reuses at once
    }
    const percpu::pool_stats s = pool.stats();
    EXPECT_EQ(s.live_objects, live.size());
    for (auto& q : live) pool.free(q);
    EXPECT_EQ(pool.stats().live_objects, 0u);
  }
}

TYPED_TEST(Pool, BadInputIsReportedAndChangesNothing) {
  EXPECT_THROW(percpu::pool<TypeParam::value>(percpu::pool_options{.stride = 1000}),
               std::invalid_argument);
  EXPECT_THROW(percpu::pool<TypeParam::value>(percpu::pool_options{.slots = -1}),
               std::invalid_argument);
  if (percpu::index_space<TypeParam::value>() > 1) {
    EXPECT_THROW(percpu::pool<TypeParam::value>(percpu::pool_options{.slots = 1}),
                 std::invalid_argument);
  }
  percpu::pool<TypeParam::value> pool(percpu::pool_options{.stride = 4096, .debug = true});
  EXPECT_THROW(pool.allocate_bytes(0), std::invalid_argument);
  EXPECT_THROW(pool.allocate_bytes(4097), std::invalid_argument);
  auto p = pool.template allocate<pair>(pair{3, 4});
  auto copy = p;
  pool.free(p);
  EXPECT_THROW(pool.free(copy), std::logic_error);  // double free
  std::int64_t outside = 0;
  EXPECT_THROW(pool.free_bytes(&outside, sizeof outside), std::invalid_argument);  // foreign
  auto q = pool.template allocate<pair>();
  EXPECT_THROW(pool.free_bytes(&q[0], 24), std::logic_error);  // wrong size
  EXPECT_EQ(pool.stats().live_objects, 1u);                    // q is still live
  pool.free(q);
  EXPECT_EQ(pool.stats().live_objects, 0u);
  percpu::pool<TypeParam::value> plain(percpu::pool_options{.debug = false});
  EXPECT_THROW(plain.free_bytes(&outside, sizeof outside), std::invalid_argument);
  EXPECT_THROW(percpu::pool<TypeParam::value>(
                   percpu::pool_options{.stride = std::size_t{1} << 46, .slots = 4096}),
               std::invalid_argument);  // slots x stride overflows the address space
}

// Without debug mode too, a bad free is refused before it writes anything: it could otherwise
// clear a live neighbour or hand the same memory to two objects.
TYPED_TEST(Pool, BadFreesNeverCorruptLiveObjects) {
  percpu::pool<TypeParam::value> pool(percpu::pool_options{.debug = false});
  auto a = pool.template allocate<pair>(pair{1, 1});
  auto b = pool.template allocate<pair>(pair{2, 2});
  char* base = reinterpret_cast<char*>(&b[0]);
  EXPECT_THROW(pool.free_bytes(base + 8, 8), std::logic_error);               // interior
  EXPECT_THROW(pool.free_bytes(base + 64, 16), std::logic_error);             // never allocated
  EXPECT_THROW(pool.free_bytes(base, 0), std::logic_error);                   // size 0
  EXPECT_THROW(pool.free_bytes(base, SIZE_MAX), std::logic_error);            // wraps when rounded
  EXPECT_THROW(pool.free_bytes(base, 2 * pool.stride()), std::logic_error);   // beyond the chunk
  EXPECT_THROW(pool.free_bytes(&b[1], sizeof(pair)), std::invalid_argument);  // slot 1, not 0
  auto copy = a;
  pool.free(a);
  EXPECT_THROW(pool.free(copy), std::logic_error);  // double free through a copy
  percpu::percpu_ptr<pair, TypeParam::value> null;
  pool.free(null);  // nothing to do
  for (const pair& slot : b) {
    EXPECT_EQ(slot.a, 2);
    EXPECT_EQ(slot.b, 2);
  }
  EXPECT_EQ(pool.stats().live_objects, 1u);
  auto c = pool.template allocate<pair>();
  EXPECT_NE(static_cast<void*>(&c[0]), static_cast<void*>(&b[0]));
}

static_assert(std::forward_iterator<percpu::percpu_ptr<std::int64_t>::iterator>);

// Threads allocate and free concurrently: every live object is distinct, and per-CPU adds into
// the objects' slots sum exactly.
TYPED_TEST(Pool, ConcurrentAllocationAndPerCpuUse) {
  constexpr index_mode M = TypeParam::value;
  constexpr int kThreads = 8, kObjects = 500;
  percpu::pool<M> pool(percpu::pool_options{.stride = 16 * 1024});  // forces several chunks
  std::vector<std::vector<percpu::percpu_ptr<std::intptr_t, M>>> owned(kThreads);
  std::vector<std::thread> pool_threads;
  for (int t = 0; t < kThreads; ++t)
    pool_threads.emplace_back([&, t] {
      for (int i = 0; i < kObjects; ++i) {
        auto p = pool.template allocate<std::intptr_t>();
        percpu::retry<M>([&](int index) { return percpu::add<M>(&p[index], 1, index); });
        if (i % 3 == 0) {
          pool.free(p);
        } else {
          owned[t].push_back(p);
        }
      }
    });
  for (auto& th : pool_threads) th.join();
  std::set<void*> seen;
  std::size_t live = 0;
  for (auto& mine : owned)
    for (auto& p : mine) {
      EXPECT_TRUE(seen.insert(&p[0]).second);
      std::intptr_t sum = 0;
      for (std::intptr_t v : p) sum += v;
      EXPECT_EQ(sum, 1);  // exactly one add, and no leftover from a freed object
      ++live;
    }
  EXPECT_EQ(pool.stats().live_objects, live);
}

// Memory follows the slots that are used: 100,000 counters touched in one slot only cost about
// that slot's pages, however many slots the pool has.
TEST(PoolMemory, UntouchedSlotsCostNoResidentMemory) {
  percpu::pool<index_mode::cpu_id> pool(percpu::pool_options{.stride = 1 << 20, .slots = 256});
  std::vector<percpu::percpu_ptr<std::int64_t>> counters;
  for (int i = 0; i < 100000; ++i) counters.push_back(pool.allocate<std::int64_t>());
  for (auto& c : counters) c[0] += 1;
  const auto s = pool.stats();
  EXPECT_GE(s.reserved_bytes, std::size_t{256} << 20);
  EXPECT_GE(s.resident_bytes, 100000u * 8);                // slot 0's pages
  EXPECT_LE(s.resident_bytes, 100000u * 8 + (64u << 10));  // and nothing of the other 255
  EXPECT_EQ(s.live_objects, 100000u);
}

}  // namespace
