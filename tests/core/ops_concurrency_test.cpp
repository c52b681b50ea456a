// Many threads (more than CPUs, so they are preempted inside sections) using the operations on
// shared per-CPU slots: totals must be exact, items conserved.
#include <gtest/gtest.h>

#include <percpu/percpu.h>
#include <percpu/tsan.h>
#include <atomic>
#include <cstring>
#include <set>
#include <thread>
#include <vector>

#include "modes.h"
#include "slots.h"

namespace {

using percpu::index_mode;
using percpu::status;

constexpr int kThreads = 8;
constexpr int kIterations = 100000;
constexpr int kFastIterations = 1000000;  // add: one lock-free instruction even in fallback

template <class T>
class Concurrency : public ::testing::Test {};
TYPED_TEST_SUITE(Concurrency, percpu::test::Modes);

// Starts all threads together, so they overlap and preempt each other inside sections.
template <class F>
void run_threads(F&& body) {
  std::atomic<int> ready{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      ready.fetch_add(1);
      while (ready.load() < kThreads) std::this_thread::yield();
      body(t);
    });
  for (auto& th : threads) th.join();
}

TYPED_TEST(Concurrency, AddsAreNeverLost) {
  constexpr index_mode M = TypeParam::value;
  auto slots = percpu::test::make_slots();
  run_threads([&](int) {
    for (int i = 0; i < kFastIterations; ++i) {
      percpu::retry<M>([&](int idx) { return percpu::add<M>(&slots[idx].value, 1, idx); });
    }
  });
  EXPECT_EQ(percpu::test::sum(slots), static_cast<std::intptr_t>(kThreads) * kFastIterations);
}

TYPED_TEST(Concurrency, CompareStoreIncrementsAreNeverLost) {
  constexpr index_mode M = TypeParam::value;
  auto slots = percpu::test::make_slots();
  run_threads([&](int) {
    for (int i = 0; i < kIterations; ++i) {
      status s;
      do {
        s = percpu::retry<M>([&](int idx) {
          const std::intptr_t old = __atomic_load_n(&slots[idx].value, __ATOMIC_RELAXED);
          return percpu::compare_store<M>(&slots[idx].value, old, old + 1, idx);
        });
      } while (s == status::compare_failed);
    }
  });
  EXPECT_EQ(percpu::test::sum(slots), static_cast<std::intptr_t>(kThreads) * kIterations);
}

struct item {
  item* next = nullptr;
  int id = 0;
};

TYPED_TEST(Concurrency, FreeListPushPopConservesItems) {
  constexpr index_mode M = TypeParam::value;
  constexpr int kItems = 256;
  auto heads = percpu::test::make_slots();
  std::vector<item> items(kItems);
  // Seed every list evenly.
  for (int i = 0; i < kItems; ++i) {
    items[i].id = i;
    auto& head = heads[i % heads.size()].value;
    items[i].next = reinterpret_cast<item*>(head);
    head = reinterpret_cast<std::intptr_t>(&items[i]);
  }
  auto push = [&](item* it) {
    percpu::retry<M>([&](int idx) {
      const std::intptr_t old = __atomic_load_n(&heads[idx].value, __ATOMIC_RELAXED);
      it->next = reinterpret_cast<item*>(old);
      // The operations hand nothing over by themselves: a caller that passes objects between
      // threads through them tells ThreadSanitizer, as the structures do (percpu/tsan.h).
      percpu::detail::tsan_release(it);
      const status s = percpu::compare_store<M>(&heads[idx].value, old,
                                                reinterpret_cast<std::intptr_t>(it), idx);
      return s == status::compare_failed ? status::aborted : s;  // head moved: try again
    });
  };
  std::atomic<long> pops{0};
  run_threads([&](int) {
    for (int i = 0; i < kIterations; ++i) {
      std::intptr_t out = 0;
      const status s = percpu::retry<M>([&](int idx) {
        return percpu::pop<M>(&heads[idx].value, 0, offsetof(item, next), &out, idx);
      });
      if (s == status::committed) {
        percpu::detail::tsan_acquire(reinterpret_cast<item*>(out));
        pops.fetch_add(1, std::memory_order_relaxed);
        push(reinterpret_cast<item*>(out));
      }
    }
  });
  EXPECT_GT(pops.load(), 0);
  std::multiset<int> seen;
  for (auto& h : heads)
    for (item* p = reinterpret_cast<item*>(h.value); p != nullptr; p = p->next) {
      seen.insert(p->id);
      ASSERT_LE(seen.size(), static_cast<size_t>(kItems)) << "cycle or duplicate";
    }
  ASSERT_EQ(seen.size(), static_cast<size_t>(kItems));
  for (int i = 0; i < kItems; ++i) EXPECT_EQ(seen.count(i), 1u) << i;
}

// A bounded per-index buffer of 16-byte records: push copies a record in with
// compare_memcpy_store; pop checks count and the record's id with compare_compare_store.
struct record {
  std::intptr_t id;
  std::intptr_t check;  // id * 3 + 1: a torn copy would break it
};
constexpr int kCapacity = 64;
struct alignas(64) buffer {
  std::intptr_t count = 0;
  record slots[kCapacity];
};

TYPED_TEST(Concurrency, MemcpyBufferConservesRecords) {
  constexpr index_mode M = TypeParam::value;
  constexpr int kRecords = 64;
  std::vector<buffer> buffers(percpu::machine_topology().cpu_id_bound);
  for (int i = 0; i < kRecords; ++i) {
    buffer& b = buffers[i % buffers.size()];
    b.slots[b.count++] = {i, i * 3 + 1};
  }
  auto push = [&](const record& r) {
    percpu::retry<M>([&](int idx) {
      buffer& b = buffers[idx];
      const std::intptr_t n = __atomic_load_n(&b.count, __ATOMIC_RELAXED);
      if (n == kCapacity) return status::aborted;  // full here: retry (elsewhere, eventually)
      const status s = percpu::compare_memcpy_store<M, percpu::commit_order::release>(
          &b.count, n, &b.slots[n], &r, sizeof(r), n + 1, idx);
      return s == status::compare_failed ? status::aborted : s;
    });
  };
  run_threads([&](int) {
    for (int i = 0; i < kIterations / 4; ++i) {
      record got{};
      const status s = percpu::retry<M>([&](int idx) {
        buffer& b = buffers[idx];
        const std::intptr_t n = __atomic_load_n(&b.count, __ATOMIC_RELAXED);
        if (n == 0) return status::compare_failed;  // empty here
        got.id = __atomic_load_n(&b.slots[n - 1].id, __ATOMIC_RELAXED);
        const status st =
            percpu::compare_compare_store<M>(&b.count, n, &b.slots[n - 1].id, got.id, n - 1, idx);
        return st == status::compare_failed ? status::aborted : st;
      });
      if (s != status::committed) continue;
      // The commit proved slot n-1 held record got.id; push an identical record back. The
      // drain below checks that every copy (8-byte words) arrived whole.
      got.check = got.id * 3 + 1;
      push(got);
    }
  });
  std::multiset<std::intptr_t> seen;
  for (auto& b : buffers)
    for (int i = 0; i < b.count; ++i) {
      seen.insert(b.slots[i].id);
      EXPECT_EQ(b.slots[i].check, b.slots[i].id * 3 + 1);
    }
  ASSERT_EQ(seen.size(), static_cast<size_t>(kRecords));
  for (int i = 0; i < kRecords; ++i) EXPECT_EQ(seen.count(i), 1u) << i;
}

}  // namespace
