#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <percpu/ops.h>
#include <percpu/pool.h>
#include <atomic>
#include <climits>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <set>
#include <string>
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
                   percpu::pool_options{.stride = std::size_t{1} << 30, .slots = 1 << 17}),
               std::invalid_argument);  // slots x stride overflows the address space
}

// Without debug mode too, a bad free is refused before it writes anything: it could otherwise
// clear a live neighbour or hand the same memory to two objects.
TYPED_TEST(Pool, BadFreesNeverCorruptLiveObjects) {
  percpu::pool<TypeParam::value> pool(percpu::pool_options{.debug = false});
  auto a = pool.template allocate<pair>(pair{1, 1});
  auto b = pool.template allocate<pair>(pair{2, 2});
  char* base = reinterpret_cast<char*>(&b[0]);
  EXPECT_THROW(pool.free_bytes(base + 8, 8), std::logic_error);              // interior
  EXPECT_THROW(pool.free_bytes(base + 64, 16), std::logic_error);            // never allocated
  EXPECT_THROW(pool.free_bytes(base, 0), std::logic_error);                  // size 0
  EXPECT_THROW(pool.free_bytes(base, SIZE_MAX), std::logic_error);           // wraps when rounded
  EXPECT_THROW(pool.free_bytes(base, 2 * pool.stride()), std::logic_error);  // beyond the chunk
  EXPECT_THROW(pool.free_bytes(&b[1], sizeof(pair)), std::logic_error);      // slot 1, not 0
  EXPECT_THROW(pool.free_bytes(base + 1, sizeof(pair)), std::logic_error);   // unaligned
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

// Debug mode: a write into a freed object is found when the object would be handed out again;
// that allocation fails naming the fault, the object is withdrawn, and nothing else changes.
TYPED_TEST(Pool, DebugModeReportsAWriteAfterFree) {
  percpu::test::pinned pin(0);
  percpu::pool<TypeParam::value> pool(percpu::pool_options{.debug = true});
  auto keep = pool.template allocate<pair>(pair{5, 6});
  auto p = pool.template allocate<pair>();
  p[0] = pair{1, 2};
  pair* stale = &p[0];
  auto copy = p;
  pool.free(p);
  EXPECT_EQ(stale->a, static_cast<std::int64_t>(0xA5A5A5A5A5A5A5A5u));  // poisoned
  stale->b = 42;                                                        // the bug
  try {
    auto q = pool.template allocate<pair>();
    ADD_FAILURE() << "a write after free went unnoticed";
    pool.free(q);
  } catch (const std::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("written after it was freed"), std::string::npos)
        << e.what();
  }
  auto r = pool.template allocate<pair>();  // the withdrawn object is never handed out again
  EXPECT_NE(static_cast<void*>(&r[0]), static_cast<void*>(stale));
  EXPECT_THROW(pool.free(copy), std::logic_error);
  EXPECT_EQ(keep[0].a, 5);
  EXPECT_EQ(pool.stats().live_objects, 2u);
  pool.free(r);
  pool.free(keep);
}

// Two threads free the same object at the same moment: exactly one free succeeds, the other is
// reported, and the object is handed out once afterwards.
TYPED_TEST(Pool, RacingDoubleFreeIsReportedOnce) {
  percpu::pool<TypeParam::value> pool(percpu::pool_options{.debug = false});
  for (int round = 0; round < 200; ++round) {
    auto p = pool.template allocate<std::int64_t>();
    std::atomic<int> ready{0}, errors{0};
    auto free_it = [&] {
      auto mine = p;
      ready.fetch_add(1);
      while (ready.load() < 2) {
      }
      try {
        pool.free(mine);
      } catch (const std::logic_error&) {
        errors.fetch_add(1);
      }
    };
    std::thread a(free_it), b(free_it);
    a.join();
    b.join();
    ASSERT_EQ(errors.load(), 1) << "round " << round;
  }
  std::set<void*> seen;
  std::vector<percpu::percpu_ptr<std::int64_t, TypeParam::value>> all;
  for (int i = 0; i < 400; ++i) {
    all.push_back(pool.template allocate<std::int64_t>());
    EXPECT_TRUE(seen.insert(&all.back()[0]).second);
  }
  EXPECT_EQ(pool.stats().live_objects, all.size());
  for (auto& q : all) pool.free(q);
}

// Objects above the cached sizes take the locked path: same zeroing, same checks.
TYPED_TEST(Pool, LargeObjectsAreReusedZeroed) {
  struct big {
    std::int64_t w[125];  // 1000 bytes
  };
  for (bool debug : {false, true}) {
    percpu::pool<TypeParam::value> pool(percpu::pool_options{.debug = debug});
    big init{};
    init.w[0] = 1;
    init.w[124] = 2;
    auto p = pool.template allocate<big>(init);
    void* first = &p[0];
    for (const big& b : p) EXPECT_EQ(b.w[124], 2);
    EXPECT_THROW(pool.free_bytes(&p[0], 600), std::logic_error);  // a size of another class
    pool.free(p);
    auto q = pool.template allocate<big>();
    EXPECT_EQ(static_cast<void*>(&q[0]), first);
    for (const big& b : q)
      for (std::int64_t v : b.w) ASSERT_EQ(v, 0);
    EXPECT_EQ(pool.stats().live_objects, 1u);
    pool.free(q);
  }
}

// Clearing freed objects for reuse must not populate slots nobody touched: counters written in
// slot 0 only are freed and allocated again, and the other slots still cost nothing. Two
// strides cover both ways of asking the kernel (whole chunk, and per slot range).
// Above 256 bytes a free's size must round as the allocation's did: to one of four sizes per
// doubling (tests/fuzz/c_api_fuzz found the documentation saying eight).
TEST(PoolErrors, LargeSizesRoundToFourSizesPerDoubling) {
  percpu::pool<index_mode::cpu_id> pool;
  void* p = pool.allocate_bytes(257);                       // 320 bytes
  EXPECT_THROW(pool.free_bytes(p, 321), std::logic_error);  // 384
  pool.free_bytes(p, 300);
  void* q = pool.allocate_bytes(1000);                      // 1024
  EXPECT_THROW(pool.free_bytes(q, 896), std::logic_error);  // 896
  pool.free_bytes(q, 897);
  EXPECT_EQ(pool.stats().live_objects, 0u);
}

TEST(PoolMemory, ReuseNeverPopulatesUntouchedSlots) {
  percpu::test::pinned pin(0);
  for (std::size_t stride : {std::size_t{64} << 10, std::size_t{1} << 20}) {
    percpu::pool<index_mode::cpu_id> pool(
        percpu::pool_options{.stride = stride, .slots = 256, .debug = false});
    constexpr int kCounters = 20000;
    std::vector<percpu::percpu_ptr<std::int64_t>> counters;
    for (int round = 0; round < 3; ++round) {
      for (int i = 0; i < kCounters; ++i) {
        counters.push_back(pool.allocate<std::int64_t>());
        ASSERT_EQ(counters.back()[0], 0) << "round " << round;  // reused ones come back zeroed
        counters.back()[0] = i + 1;
      }
      for (auto& c : counters) pool.free(c);
      counters.clear();
    }
    const auto s = pool.stats();
    EXPECT_LE(s.resident_bytes, 2 * kCounters * 8u + 2 * stride) << "stride " << stride;
    EXPECT_EQ(s.live_objects, 0u);
    EXPECT_GE(s.free_objects, static_cast<std::size_t>(kCounters));
  }
}

// Objects allocated on one thread and freed on another, under migration between CPUs: no object
// is ever held by two owners, each comes zeroed in every slot, and all are freed at the end.
TYPED_TEST(Pool, CrossThreadFreesConserveObjects) {
  constexpr index_mode M = TypeParam::value;
  constexpr int kThreads = 4, kRounds = 20000, kMailboxes = 8;
  percpu::pool<M> pool(percpu::pool_options{.debug = false});
  std::atomic<std::intptr_t> mailbox[kMailboxes] = {};
  std::atomic<long> errors{0};
  auto check_tag = [&](std::int64_t* slot0, std::int64_t tag) {
    for (int s = 0; s < pool.slots(); ++s)
      if (slot0[s * static_cast<std::ptrdiff_t>(pool.stride() / 8)] != tag) errors.fetch_add(1);
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < kRounds; ++i) {
        auto p = pool.template allocate<std::int64_t>();
        check_tag(&p[0], 0);
        const std::int64_t tag = (std::int64_t{t} << 32) | (i + 1);
        for (std::int64_t& v : p) v = tag;
        // Hand it on through a mailbox; free whatever was there (another thread's object).
        const auto other = mailbox[(i + t) % kMailboxes].exchange(
            reinterpret_cast<std::intptr_t>(&p[0]), std::memory_order_acq_rel);
        if (other != 0) {
          auto* o = reinterpret_cast<std::int64_t*>(other);
          const std::int64_t seen = *o;
          check_tag(o, seen);
          pool.free_bytes(o, sizeof(std::int64_t));
        }
        if (i % 1000 == 0) std::this_thread::yield();
      }
    });
  for (auto& th : threads) th.join();
  for (auto& m : mailbox)
    if (const auto left = m.load()) pool.free_bytes(reinterpret_cast<void*>(left), 8);
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(pool.stats().live_objects, 0u);
}

// drain_caches() moves one index's cached objects to the central lists; they are allocated again
// from there, and nothing is lost.
TYPED_TEST(Pool, DrainCachesMovesObjectsToTheCentralLists) {
  percpu::test::pinned pin(0);
  percpu::pool<TypeParam::value> pool(percpu::pool_options{.debug = false});
  std::vector<percpu::percpu_ptr<std::int64_t, TypeParam::value>> objects;
  for (int i = 0; i < 40; ++i) objects.push_back(pool.template allocate<std::int64_t>());
  for (auto& o : objects) pool.free(o);
  const int index = percpu::current_index<TypeParam::value>();
  const auto before = pool.stats();
  EXPECT_GT(pool.drain_caches(index), 40u);  // the 40 freed, and the rest of the carved batch
  EXPECT_EQ(pool.drain_caches(index), 0u);
  const auto after = pool.stats();
  EXPECT_EQ(after.free_objects, before.free_objects);  // moved, not lost
  EXPECT_THROW(pool.drain_caches(-1), std::out_of_range);
  EXPECT_THROW(pool.drain_caches(percpu::index_space<TypeParam::value>()), std::out_of_range);
  std::set<void*> seen;
  for (int i = 0; i < 200; ++i) {
    objects.push_back(pool.template allocate<std::int64_t>());
    EXPECT_TRUE(seen.insert(&objects.back()[0]).second);
    EXPECT_EQ(objects.back()[0], 0);
  }
}

// A child forked while other threads allocate can use the pool: no mutex is inherited held.
TEST(PoolFork, ChildAllocatesWhileParentThreadsWereAllocating) {
  percpu::pool<index_mode::cpu_id> pool(percpu::pool_options{.debug = false});
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t)
    threads.emplace_back([&] {
      std::vector<percpu::percpu_ptr<std::int64_t>> v;
      while (!stop.load()) {
        for (int i = 0; i < 100; ++i) v.push_back(pool.allocate<std::int64_t>());
        for (auto& p : v) pool.free(p);
        v.clear();
      }
    });
  for (int k = 0; k < 20; ++k) {
    const pid_t child = fork();
    if (child == 0) {
      alarm(10);  // a deadlock fails the test instead of hanging it
      // The parent's threads' live objects were copied too: only the child's own are counted.
      const std::size_t inherited = pool.stats().live_objects;
      std::vector<percpu::percpu_ptr<std::int64_t>> v;
      for (int i = 0; i < 1000; ++i) v.push_back(pool.allocate<std::int64_t>());
      const bool counted = pool.stats().live_objects == inherited + 1000;
      for (auto& p : v) pool.free(p);
      _exit(counted && pool.stats().live_objects == inherited ? 0 : 1);
    }
    int status = 0;
    ASSERT_EQ(waitpid(child, &status, 0), child);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
  }
  stop.store(true);
  for (auto& th : threads) th.join();
}

// Regression: a failed growth (no address space for the next group) must leave the pool as it
// was: every later allocation fails cleanly, and what was allocated stays usable.
TEST(PoolLimits, FailedGrowthLeavesThePoolUsable) {
  // Chunks of 32 TiB (1 GiB x 32768 slots): the address space holds only a few.
  const std::size_t stride = std::size_t{1} << 30;
  percpu::pool<index_mode::cpu_id> pool(percpu::pool_options{.stride = stride, .slots = 32768});
  std::vector<void*> live;
  int failures = 0;
  for (int i = 0; i < 16; ++i) {
    try {
      live.push_back(pool.allocate_bytes(stride));  // a chunk each
    } catch (const std::bad_alloc&) {
      ++failures;
    }
  }
  EXPECT_GT(failures, 0);
  EXPECT_GE(live.size(), 1u);
  static_cast<char*>(live.front())[0] = 1;  // still usable (stats() would scan 32 TiB chunks)
  EXPECT_THROW(percpu::pool<index_mode::cpu_id>(percpu::pool_options{.stride = 2 * stride}),
               std::invalid_argument);
}

// Regression: a forked child reads its own page tables. Objects the child writes (on pages the
// parent never touched), frees and allocates again come back zeroed.
TEST(PoolFork, ChildClearsWhatTheChildWrote) {
  percpu::pool<index_mode::cpu_id> pool(percpu::pool_options{.stride = 64 << 10});
  pool.free_bytes(pool.allocate_bytes(1000), 1000);  // the parent asks the kernel once
  const pid_t child = fork();
  if (child == 0) {
    alarm(10);
    std::vector<char*> v;
    for (int i = 0; i < 20; ++i) v.push_back(static_cast<char*>(pool.allocate_bytes(2000)));
    for (char* o : v) std::memset(o, 0x77, 2000);
    for (char* o : v) pool.free_bytes(o, 2000);
    int bad = 0;
    for (int i = 0; i < 20; ++i) {
      const char* o = static_cast<const char*>(pool.allocate_bytes(2000));
      for (int k = 0; k < 2000; ++k) bad += o[k] != 0;
    }
    _exit(bad == 0 ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
}

// Regression: clearing touches only the bytes of pages that may hold data. Objects straddling a
// page boundary, freed and allocated again many times next to one written page, must not spread
// residency to the neighbouring pages of that slot.
TEST(PoolMemory, ClearingDoesNotSpreadToNeighbourPages) {
  percpu::test::pinned pin(0);
  for (bool debug : {false, true}) {
    const std::size_t stride = 64 << 10;
    percpu::pool<index_mode::cpu_id> pool(
        percpu::pool_options{.stride = stride, .slots = 16, .debug = debug});
    std::vector<char*> objects;
    for (int i = 0; i < 60; ++i) objects.push_back(static_cast<char*>(pool.allocate_bytes(1000)));
    std::memset(objects[0] + 5 * stride, 1, 8);  // the only write: page 0 of slot 5
    for (int cycle = 0; cycle < 20; ++cycle) {
      for (char* o : objects) pool.free_bytes(o, 1000);
      for (char*& o : objects) o = static_cast<char*>(pool.allocate_bytes(1000));
    }
    EXPECT_EQ(pool.stats().resident_bytes, 4096u) << "debug " << debug;
    for (char* o : objects) pool.free_bytes(o, 1000);
  }
}

// Regression: freed objects above 256 bytes serve later allocations of similar sizes, so memory
// does not grow with the number of distinct sizes used.
TEST(PoolMemory, LargeObjectsOfManySizesReuseEachOther) {
  percpu::pool<index_mode::cpu_id> pool(percpu::pool_options{.stride = 64 << 10});
  for (int i = 0; i < 4000; ++i) {
    const std::size_t size = 264 + static_cast<std::size_t>(i % 4000) * 8;
    void* p = pool.allocate_bytes(size);
    std::memset(p, 1, size);
    pool.free_bytes(p, size);
  }
  const auto s = pool.stats();
  EXPECT_LE(s.free_objects, 200u);  // four sizes per doubling, plus chunk tails
  EXPECT_LE(s.resident_bytes, 4u << 20);
}

}  // namespace
