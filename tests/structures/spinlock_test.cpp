#include <gtest/gtest.h>

#include <percpu/slot_array.h>
#include <percpu/spinlock.h>
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "modes.h"
#include "pin.h"

namespace {

template <class T>
class Spinlock : public ::testing::Test {};
TYPED_TEST_SUITE(Spinlock, percpu::test::Modes);

TYPED_TEST(Spinlock, LockReturnsTheCurrentIndexAndExcludesOthers) {
  percpu::test::pinned pin(0);
  percpu::spinlock<TypeParam::value> lock;
  const int index = lock.lock();
  EXPECT_EQ(index, percpu::current_index<TypeParam::value>());
  EXPECT_TRUE(lock.is_locked(index));
  EXPECT_EQ(lock.try_lock(), -1);  // same index, held
  lock.unlock(index);
  EXPECT_FALSE(lock.is_locked(index));
  EXPECT_THROW(lock.unlock(index), std::logic_error);  // not held
  EXPECT_THROW(lock.unlock(lock.slots()), std::out_of_range);
  EXPECT_EQ(lock.try_lock(), index);
  lock.unlock(index);
}

TYPED_TEST(Spinlock, AGuardHoldsItsIndexUntilItsScopeEnds) {
  constexpr percpu::index_mode M = TypeParam::value;
  using guard = typename percpu::spinlock<M>::guard;
  percpu::test::pinned pin(0);
  percpu::spinlock<M> lock;
  int index;
  {
    guard g(lock);
    index = g.index();
    EXPECT_EQ(index, percpu::current_index<M>());
    EXPECT_TRUE(lock.is_locked(index));
    EXPECT_EQ(lock.try_lock(), -1);
  }
  EXPECT_FALSE(lock.is_locked(index));
  if constexpr (M == percpu::index_mode::cpu_id) {
    // A guard taken on a held index waits (its slow path) until the holder unlocks.
    const int held = lock.lock();
    std::atomic<bool> taken{false};
    std::thread waiter([&] {
      percpu::test::pinned on(0);
      guard g(lock);
      EXPECT_EQ(g.index(), held);
      taken = true;
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_FALSE(taken.load());
    lock.unlock(held);
    waiter.join();
    EXPECT_TRUE(taken.load());
    EXPECT_FALSE(lock.is_locked(held));
  }
}

// Each index guards a pair of plain (non-atomic) counters updated with two separate stores;
// the lock must make every update whole: a == b and the sum equals the number of updates.
TYPED_TEST(Spinlock, GuardsMultiStoreUpdates) {
  struct pair {
    long a, b;
  };
  constexpr int kThreads = 8;
  constexpr long kUpdates = 200000;
  percpu::spinlock<TypeParam::value> lock;
  percpu::slot_array<pair> data(lock.slots());
  std::vector<std::thread> pool;
  for (int t = 0; t < kThreads; ++t)
    pool.emplace_back([&] {
      for (long i = 0; i < kUpdates; ++i) {
        typename percpu::spinlock<TypeParam::value>::guard g(lock);
        pair& p = data[g.index()];
        const long a = p.a;
        p.a = a + 1;
        if ((i & 1023) == 0) std::this_thread::yield();  // hold it across a reschedule
        p.b = p.b + 1;
      }
    });
  for (auto& th : pool) th.join();
  long sum = 0;
  for (int i = 0; i < data.size(); ++i) {
    EXPECT_EQ(data[i].a, data[i].b) << "index " << i;
    EXPECT_FALSE(lock.is_locked(i));
    sum += data[i].a;
  }
  EXPECT_EQ(sum, kThreads * kUpdates);
}

}  // namespace
