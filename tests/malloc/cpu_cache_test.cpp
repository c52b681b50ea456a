// percpu malloc's per-CPU caches: the current-index stack sections of the fast paths (LIFO,
// capacity, stepping aside for drained stacks, fallback mode and unregistered areas) and the
// generic slow paths beside them.
#include <gtest/gtest.h>

#include <percpu/percpu.h>
#include <percpu/remote.h>
#include "malloc/allocator.h"
#include "malloc/cpu_cache.h"
#include "malloc/maintenance.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

namespace {

using namespace percpu::malloc_impl;

constexpr std::size_t kClass = 5;  // 80-byte objects; only addresses are stored here

// The fast paths as the allocator uses them: committed or not (a pop gives nullptr when not).
bool push_fast(std::size_t cls, void* p) {
  return cache_push_fast(cls, p) == percpu::arch::current_result::committed;
}
void* pop_fast(std::size_t cls) {
  void* p = nullptr;
  return cache_pop_fast(cls, p) == percpu::arch::current_result::committed ? p : nullptr;
}

// Empties every index's caches into the central lists (remote drains).
void empty_all() {
  for (int i = 0; i < cache_indices(); ++i) cache_drain(i);
  ASSERT_EQ(cache_count(kClass), 0u);
}

std::intptr_t* stack_at(int index) {
  return cache_layout::g_regions.load() + index * cache_layout::kRegionWords +
         cache_layout::kOffsets[kClass];
}

TEST(MallocCpuCache, FastPathsAreLifoAndBounded) {
  ASSERT_TRUE(cache_init());
  if (!percpu::rseq_active()) {
    alignas(16) static char object[16];
    EXPECT_FALSE(push_fast(kClass, object)) << "fallback mode: the fast paths step aside";
    EXPECT_EQ(pop_fast(kClass), nullptr);
    GTEST_SKIP() << "fallback mode";
  }
  // A migration between two operations moves to another index's stack: run on one CPU. Even
  // so, the thread's mm_cid can change while it sleeps (another thread of the process took this
  // CPU's); an attempt that saw its index change is run again, and only a steady one is judged.
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(0, &one);
  std::thread t([&] {
    ASSERT_EQ(sched_setaffinity(0, sizeof one, &one), 0);
    percpu::current_cpu();  // registers this thread where percpu owns the area
    // One operation, run again while its section aborts (a preemption or signal).
    auto push = [](void* p) {
      percpu::arch::current_result r;
      while ((r = cache_push_fast(kClass, p)) == percpu::arch::current_result::aborted) {
      }
      return r == percpu::arch::current_result::committed;
    };
    auto pop = []() -> void* {
      void* p = nullptr;
      percpu::arch::current_result r;
      while ((r = cache_pop_fast(kClass, p)) == percpu::arch::current_result::aborted) {
      }
      return r == percpu::arch::current_result::committed ? p : nullptr;
    };
    bool judged = false;
    for (int attempt = 0; attempt < 20 && !judged; ++attempt) {
      empty_all();
      const int index = percpu::current_mm_cid();
      bool moved = false;
      auto still = [&] { moved |= percpu::current_mm_cid() != index; };
      while (cache_note_miss(kClass)) {
      }
      const std::size_t cap = cache_capacity_of(index, kClass);
      std::vector<char> objects(cap + 1);
      std::size_t pushed = 0;
      while (pushed < cap && push(&objects[pushed])) ++pushed;
      still();
      const bool pushed_past_room = push(&objects[cap]);
      const std::size_t count = cache_count(kClass);
      // A capacity lowered below what the stack holds (maintenance does that): the generic
      // pushes decline too, and nothing is written past the stack's room.
      std::intptr_t* cap_word = cache_layout::g_regions.load() +
                                index * cache_layout::kRegionWords + cache_layout::kCapWord +
                                kClass;
      const std::intptr_t saved = *cap_word;
      __atomic_store_n(cap_word, 1, __ATOMIC_RELAXED);
      const bool generic_push = cache_push(kClass, &objects[cap]);
      void* more[1] = {&objects[cap]};
      const std::size_t generic_many = cache_push_many(kClass, more, 1);
      const std::size_t count_after = cache_count(kClass);
      __atomic_store_n(cap_word, saved, __ATOMIC_RELAXED);
      std::vector<void*> popped;
      while (popped.size() <= cap + 1)
        if (void* p = pop()) {
          popped.push_back(p);
        } else {
          break;
        }
      still();
      if (moved) {
        // What was pushed is on two indices' stacks: only this thread pushed to them since
        // empty_all(), and the addresses are no allocator's, so the stacks are emptied in place
        // (a drain would hand them to the central lists).
        for (int i = 0; i < cache_indices(); ++i)
          __atomic_store_n(stack_at(i), 0, __ATOMIC_RELEASE);
        continue;
      }
      judged = true;
      EXPECT_EQ(cap, cache_max_capacity(kClass)) << "misses grow the capacity to the stack's room";
      EXPECT_EQ(pushed, cap);
      EXPECT_FALSE(pushed_past_room) << "a full stack declines";
      EXPECT_EQ(count, cap);
      EXPECT_FALSE(generic_push);
      EXPECT_EQ(generic_many, 0u) << "no room left";
      EXPECT_EQ(count_after, cap);
      ASSERT_EQ(popped.size(), cap) << "an empty stack declines";
      for (std::size_t i = 0; i < cap; ++i) ASSERT_EQ(popped[i], &objects[cap - 1 - i]) << i;
    }
    EXPECT_TRUE(judged) << "the index changed in each of 20 attempts";
  });
  t.join();
}

TEST(MallocCpuCache, FastPathsLeaveADrainedStackAlone) {
  ASSERT_TRUE(cache_init());
  if (!percpu::rseq_active()) GTEST_SKIP() << "fallback mode";
  empty_all();
  void* p = percpu::malloc_impl::allocate(80);
  void* q = percpu::malloc_impl::allocate(80);
  percpu::malloc_impl::deallocate(p);  // cached on this thread's index
  const std::size_t cached = cache_count(kClass);
  const int indices = cache_indices();
  // What a remote drain does while it owns a stack: the count's closed bit.
  for (int i = 0; i < indices; ++i)
    __atomic_fetch_or(stack_at(i), percpu::detail::kCountClosed, __ATOMIC_SEQ_CST);
  EXPECT_EQ(pop_fast(kClass), nullptr);
  EXPECT_FALSE(push_fast(kClass, q));
  for (int i = 0; i < indices; ++i)
    __atomic_fetch_and(stack_at(i), ~percpu::detail::kCountClosed, __ATOMIC_SEQ_CST);
  EXPECT_EQ(cache_count(kClass), cached) << "nothing moved while closed";
  percpu::malloc_impl::deallocate(q);
  empty_all();
}

TEST(MallocCpuCache, FastPathsStepAsideOnAThreadWhoseAreaIsUnregistered) {
  if (percpu::registration().owner != percpu::area_owner::percpu)
    GTEST_SKIP() << "percpu does not own the area (run with GLIBC_TUNABLES=glibc.pthread.rseq=0)";
  ASSERT_TRUE(cache_init());
  std::thread t([] {
    empty_all();
    void* p = percpu::malloc_impl::allocate(80);  // registers this thread
    void* q = percpu::malloc_impl::allocate(80);
    percpu::malloc_impl::deallocate(p);
    const std::size_t cached = cache_count(kClass);  // p and the rest of its refill batch
    ASSERT_EQ(percpu::detail::unregister_this_thread(), 0);
    // The kernel has set cpu_id to -1 and mm_cid to 0: a section would run unprotected.
    EXPECT_EQ(pop_fast(kClass), nullptr);
    EXPECT_FALSE(push_fast(kClass, q));
    EXPECT_EQ(cache_count(kClass), cached) << "nothing moved";
    percpu::malloc_impl::deallocate(q);  // the slow path registers again
    EXPECT_EQ(cache_count(kClass), cached + 1);
    empty_all();
  });
  t.join();
}

TEST(MallocCpuCache, CapacitiesGrowOnMissesWithinTheBudgetAndShrinkWhenUnused) {
  ASSERT_TRUE(cache_init());
  std::thread t([] {
    const int index = percpu::current_mm_cid();
    // The largest classes: a few misses exhaust any budget of a few MiB.
    for (std::size_t cls = kClassCount - 1; cls > kClassCount - 10; --cls)
      while (cache_note_miss(cls)) {
      }
    EXPECT_LE(cache_committed_bytes(index), cache_budget_bytes());
    EXPECT_GT(cache_committed_bytes(index), cache_budget_bytes() / 2);
    std::size_t before = 0;
    for (std::size_t cls = 1; cls < kClassCount; ++cls) before += cache_capacity_of(index, cls);
    EXPECT_FALSE(cache_note_miss(kClassCount - 1)) << "over budget: no growth";
    // No misses since: each pass gives a batch of every unused class back (or, if the index
    // looks idle, drains it and drops its capacities).
    maintain();
    maintain();
    std::size_t after = 0;
    for (std::size_t cls = 1; cls < kClassCount; ++cls) after += cache_capacity_of(index, cls);
    EXPECT_LT(after, before);
    EXPECT_LT(cache_committed_bytes(index), cache_budget_bytes() / 2);
  });
  t.join();
}

// Objects must be real ones for the drain (it gives them to the central lists).
TEST(MallocCpuCache, DrainMovesAnIndexsObjectsToTheCentralLists) {
  ASSERT_TRUE(cache_init());
  empty_all();
  std::vector<void*> objects;
  for (int i = 0; i < 6; ++i) objects.push_back(percpu::malloc_impl::allocate(80));
  for (void* p : objects) percpu::malloc_impl::deallocate(p);  // into this index's cache
  const std::size_t cached = cache_count(kClass);              // and the rest of the refill batch
  EXPECT_GE(cached, 6u);
  std::size_t moved = 0;
  for (int i = 0; i < cache_indices(); ++i) moved += cache_drain(i);
  EXPECT_EQ(moved, cached);
  EXPECT_EQ(cache_count(kClass), 0u);
  EXPECT_EQ(cache_drain(-1), 0u);
  EXPECT_EQ(cache_drain(cache_indices()), 0u);
  // The drained objects come back through the central lists, live and usable.
  std::vector<void*> again;
  for (int i = 0; i < 6; ++i) again.push_back(percpu::malloc_impl::allocate(80));
  for (void* p : again) percpu::malloc_impl::deallocate(p);
}

TEST(MallocCpuCache, DrainMovesADeepStackInRoundsAndLosesNothing) {
  ASSERT_TRUE(cache_init());
  if (!percpu::rseq_active()) GTEST_SKIP() << "fallback mode";
  ASSERT_GT(cache_max_capacity(kClass), 1000u) << "a class of the deep stacks";
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(0, &one);
  std::thread t([&] {
    ASSERT_EQ(sched_setaffinity(0, sizeof one, &one), 0);
    percpu::current_cpu();
    empty_all();
    while (cache_note_miss(kClass)) {
    }
    // 1,500 live objects freed into one stack: a drain moves them 256 at a time, each round
    // closing and fencing the stack again.
    std::vector<void*> objects;
    for (int i = 0; i < 1500; ++i) objects.push_back(percpu::malloc_impl::allocate(80));
    const std::size_t before = cache_count(kClass);
    for (void* p : objects) percpu::malloc_impl::deallocate(p);
    const std::size_t cached = cache_count(kClass);
    ASSERT_GT(cached, 1000u + before) << "the frees stayed in the stack";
    const int index = percpu::current_mm_cid() >= 0 ? percpu::current_mm_cid() : 0;
    std::size_t moved = 0;
    for (int i = 0; i < cache_indices(); ++i) moved += cache_drain(i);
    EXPECT_EQ(moved, cached);
    EXPECT_EQ(cache_count(kClass), 0u);
    EXPECT_EQ(cache_capacity_of(index, kClass), 0u) << "an idle index gives its budget back";
    // Every object comes back, once: the central lists hold each of them once.
    std::vector<void*> again;
    for (int i = 0; i < 1500; ++i) again.push_back(percpu::malloc_impl::allocate(80));
    std::sort(again.begin(), again.end());
    EXPECT_EQ(std::adjacent_find(again.begin(), again.end()), again.end()) << "handed out twice";
    for (void* p : again) percpu::malloc_impl::deallocate(p);
  });
  t.join();
}

TEST(MallocCpuCache, MaintenanceDrainsOnlyIndicesThatStayIdle) {
  ASSERT_TRUE(cache_init());
  empty_all();
  void* p = percpu::malloc_impl::allocate(80);
  percpu::malloc_impl::deallocate(p);
  const std::size_t cached = cache_count(kClass);
  ASSERT_GT(cached, 0u);
  const auto before = maintenance_stats_now();
  maintain();  // the first pass after a change only takes a fingerprint
  EXPECT_EQ(cache_count(kClass), cached) << "an index that just changed is not idle";
  maintain();  // unchanged since: idle
  EXPECT_EQ(cache_count(kClass), 0u);
  const auto after = maintenance_stats_now();
  EXPECT_EQ(after.passes, before.passes + 2);
  EXPECT_GE(after.drained_objects, before.drained_objects + cached);
}

}  // namespace

// percpu::pool's drain allocates while it holds its remote section: malloc's maintenance, run
// from that allocation, must skip its own remote work instead of waiting for the section.
TEST(MallocCpuCache, MaintenanceInsideARemoteSectionSkipsItsDrains) {
  ASSERT_TRUE(cache_init());
  void* p = percpu::malloc_impl::allocate(80);
  percpu::malloc_impl::deallocate(p);
  const std::size_t cached = cache_count(kClass);
  ASSERT_GT(cached, 0u);
  std::atomic<bool> done{false};
  std::thread t([&] {
    percpu::detail::remote_section held;
    maintain();
    maintain();  // would drain an idle index, or trim the unused class
    for (int i = 0; i < cache_indices(); ++i) cache_drain(i);
    done = true;
  });
  for (int i = 0; i < 1000 && !done; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_TRUE(done.load()) << "maintenance waited for the remote section its thread holds";
  t.join();
  EXPECT_EQ(cache_count(kClass), cached) << "nothing moved while the section was held";
  empty_all();
}
