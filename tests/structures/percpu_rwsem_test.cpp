#include <gtest/gtest.h>

#include <percpu/percpu_rwsem.h>
#include <percpu/pool.h>
#include <percpu/tsan.h>
#include <atomic>
#include <chrono>
#include <mutex>
#include <shared_mutex>
#include <thread>
#include <vector>

#include "child.h"
#include "modes.h"
#include "pin.h"

namespace {

using namespace std::chrono_literals;

template <class T>
class PercpuRwsem : public ::testing::Test {};
TYPED_TEST_SUITE(PercpuRwsem, percpu::test::Modes);

int second_cpu() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return -1;
  for (int c = 1; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) return c;
  return -1;
}

// Waits up to `limit` for `done()`; true once it holds.
template <class Done>
bool eventually(Done done, std::chrono::milliseconds limit = 10s) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (!done()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

TYPED_TEST(PercpuRwsem, TheStandardLockWrappersWork) {
  percpu::percpu_rwsem<TypeParam::value> lock;
  {
    std::shared_lock<percpu::percpu_rwsem<TypeParam::value>> r1(lock);
    std::shared_lock<percpu::percpu_rwsem<TypeParam::value>> r2(lock);
    EXPECT_EQ(lock.readers(), 2);
    EXPECT_FALSE(lock.try_lock());
    EXPECT_TRUE(lock.try_lock_shared());
    lock.unlock_shared();
  }
  EXPECT_EQ(lock.readers(), 0);
  {
    std::unique_lock<percpu::percpu_rwsem<TypeParam::value>> w(lock);
    EXPECT_FALSE(lock.try_lock_shared());
    EXPECT_FALSE(lock.try_lock());
    EXPECT_EQ(lock.readers(), 0);
  }
  {
    std::scoped_lock w(lock);
    EXPECT_FALSE(lock.try_lock_shared());
  }
  EXPECT_TRUE(lock.try_lock_shared());
  lock.unlock_shared();
  const percpu::remote_result<bool> r = lock.try_lock_or_error();
  EXPECT_TRUE(r.value);
  EXPECT_FALSE(r.error);
  lock.unlock();
}

TYPED_TEST(PercpuRwsem, ReadersMayUnlockOnAnotherCpu) {
  const int cpu = second_cpu();
  if (cpu < 1) GTEST_SKIP() << "needs a second CPU";
  percpu::percpu_rwsem<TypeParam::value> lock;
  for (int i = 0; i < 3; ++i) {
    percpu::test::pinned on(0);
    lock.lock_shared();
  }
  {
    percpu::test::pinned on(cpu);
    for (int i = 0; i < 3; ++i) lock.unlock_shared();
  }
  EXPECT_EQ(lock.readers(), 0);
  EXPECT_TRUE(lock.try_lock());  // the sum is what counts, not each slot
  lock.unlock();
}

TYPED_TEST(PercpuRwsem, AWriterWaitsForTheReadersInside) {
  percpu::percpu_rwsem<TypeParam::value> lock;
  lock.lock_shared();
  std::atomic<bool> writing{false};
  std::thread writer([&] {
    lock.lock();
    writing = true;
    lock.unlock();
  });
  // The writer closes the gate: new readers are refused while it waits.
  ASSERT_TRUE(eventually([&] {
    if (!lock.try_lock_shared()) return true;
    lock.unlock_shared();
    return false;
  }));
  std::this_thread::sleep_for(50ms);
  EXPECT_FALSE(writing.load());
  lock.unlock_shared();
  writer.join();
  EXPECT_TRUE(writing.load());
  EXPECT_TRUE(lock.try_lock_shared());
  lock.unlock_shared();
}

TYPED_TEST(PercpuRwsem, ReadersWaitForTheWriterAndEnterWhenItLeaves) {
  percpu::percpu_rwsem<TypeParam::value> lock;
  lock.lock();
  std::atomic<int> inside{0};
  std::vector<std::thread> readers;
  for (int i = 0; i < 4; ++i) {
    readers.emplace_back([&] {
      lock.lock_shared();
      ++inside;
      std::this_thread::sleep_for(20ms);
      lock.unlock_shared();
    });
  }
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(inside.load(), 0);
  lock.unlock();
  for (auto& t : readers) t.join();
  EXPECT_EQ(inside.load(), 4);
  EXPECT_EQ(lock.readers(), 0);
}

TYPED_TEST(PercpuRwsem, NeitherSideStarves) {
  percpu::percpu_rwsem<TypeParam::value> lock;
  std::atomic<bool> stop{false};
  // Readers that overlap without pause: a writer still gets in.
  std::vector<std::thread> readers;
  for (int i = 0; i < 3; ++i) {
    readers.emplace_back([&] {
      while (!stop.load(std::memory_order_relaxed)) {
        std::shared_lock<percpu::percpu_rwsem<TypeParam::value>> r(lock);
        std::this_thread::sleep_for(100us);
      }
    });
  }
  std::this_thread::sleep_for(20ms);
  for (int i = 0; i < 20; ++i) {
    lock.lock();
    lock.unlock();
  }
  stop = true;
  for (auto& t : readers) t.join();
  // Writers back to back: a reader still gets in.
  stop = false;
  std::vector<std::thread> writers;
  for (int i = 0; i < 2; ++i) {
    writers.emplace_back([&] {
      while (!stop.load(std::memory_order_relaxed)) {
        std::unique_lock<percpu::percpu_rwsem<TypeParam::value>> w(lock);
        std::this_thread::sleep_for(100us);
      }
    });
  }
  std::this_thread::sleep_for(20ms);
  for (int i = 0; i < 20; ++i) {
    lock.lock_shared();
    lock.unlock_shared();
  }
  stop = true;
  for (auto& t : writers) t.join();
  EXPECT_EQ(lock.readers(), 0);
}

// Readers check that all words are equal; writers raise them one at a time. A reader that ever
// overlapped a writer would see them differ.
TYPED_TEST(PercpuRwsem, AWriterNeverOverlapsAReader) {
  constexpr int kWords = 8;
  percpu::percpu_rwsem<TypeParam::value> lock;
  std::vector<std::uint64_t> words(kWords, 0);
  std::atomic<bool> stop{false};
  std::atomic<long> torn{0}, reads{0}, writes{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (long i = 0; !stop.load(std::memory_order_relaxed); ++i) {
        if (t == 0 && i % 50 == 0) {
          std::unique_lock<percpu::percpu_rwsem<TypeParam::value>> w(lock);
          for (auto& w8 : words) {
            __atomic_store_n(&w8, __atomic_load_n(&w8, __ATOMIC_RELAXED) + 1, __ATOMIC_RELAXED);
            std::atomic_signal_fence(std::memory_order_seq_cst);
          }
          ++writes;
        } else {
          std::shared_lock<percpu::percpu_rwsem<TypeParam::value>> r(lock);
          const std::uint64_t first = __atomic_load_n(&words[0], __ATOMIC_RELAXED);
          for (auto& w8 : words)
            if (__atomic_load_n(&w8, __ATOMIC_RELAXED) != first) ++torn;
          ++reads;
        }
      }
    });
  }
  std::this_thread::sleep_for(400ms);
  stop = true;
  for (auto& t : threads) t.join();
  EXPECT_EQ(torn.load(), 0);
  EXPECT_GT(writes.load(), 0);
  EXPECT_GT(reads.load(), 0);
  for (auto w8 : words) EXPECT_EQ(w8, static_cast<std::uint64_t>(writes.load()));
  EXPECT_EQ(lock.readers(), 0);
}

TYPED_TEST(PercpuRwsem, AfterAWriterReadersTakeTheSharedPathUntilItReopens) {
  percpu::percpu_rwsem<TypeParam::value> lock;
  EXPECT_TRUE(lock.readers_per_cpu());
  lock.lock();
  lock.unlock();
  EXPECT_FALSE(lock.readers_per_cpu());  // closed by the writer's fence, still closed
  // Shared-path locks and per-CPU unlocks: the sum stays right, and a writer needs no fence.
  for (int i = 0; i < 3; ++i) lock.lock_shared();
  EXPECT_EQ(lock.readers(), 3);
  EXPECT_FALSE(lock.try_lock());
  for (int i = 0; i < 3; ++i) lock.unlock_shared();
  EXPECT_EQ(lock.readers(), 0);
  EXPECT_TRUE(lock.try_lock());
  lock.unlock();
  // Once ten fences' time has passed, a shared-path reader reopens the per-CPU path (the clock
  // is read every 64th entry).
  EXPECT_TRUE(eventually([&] {
    for (int i = 0; i < 64; ++i) {
      lock.lock_shared();
      lock.unlock_shared();
    }
    return lock.readers_per_cpu();
  }));
  EXPECT_EQ(lock.readers(), 0);
}

// fork() while other threads are inside the lock's calls: what they were doing must not leave
// the child's lock unusable. A try_lock() or try_lock_shared() in progress holds nothing; readers
// and writers waiting in the parent do not exist in the child; a write lock the forking thread
// holds stays its own, to unlock.
TYPED_TEST(PercpuRwsem, ForkWhileOtherThreadsTryOrWaitLeavesTheChildsLockUsable) {
#if PERCPU_TSAN
  GTEST_SKIP() << "ThreadSanitizer's runtime is not usable in a child forked from threads";
#endif
  using rwsem = percpu::percpu_rwsem<TypeParam::value>;
  rwsem lock;
  const auto child_uses = [&](bool holds_write, bool holds_read) {
    return percpu::test::in_child(
        [&] {
          if (holds_write) lock.unlock();
          if (holds_read) lock.unlock_shared();
          lock.lock();
          lock.unlock();
          lock.lock_shared();
          const bool one = lock.readers() == 1;
          lock.unlock_shared();
          return one ? 0 : 1;
        },
        10);
  };
  std::atomic<bool> stop{false};
  // A reader holds the lock while another thread's try_lock() keeps failing.
  lock.lock_shared();
  std::thread trier([&] {
    while (!stop.load(std::memory_order_relaxed)) EXPECT_FALSE(lock.try_lock());
  });
  for (int i = 0; i < 20; ++i) ASSERT_EQ(child_uses(false, true), 0) << "fork " << i;
  stop = true;
  trier.join();
  lock.unlock_shared();
  // The writer holds it while another thread's try_lock_shared() keeps failing.
  stop = false;
  lock.lock();
  std::thread reader_trier([&] {
    while (!stop.load(std::memory_order_relaxed)) EXPECT_FALSE(lock.try_lock_shared());
  });
  for (int i = 0; i < 20; ++i) ASSERT_EQ(child_uses(true, false), 0) << "fork " << i;
  stop = true;
  reader_trier.join();
  // The writer holds it while readers and another writer wait.
  std::vector<std::thread> waiters;
  for (int t = 0; t < 2; ++t) waiters.emplace_back([&] { std::shared_lock<rwsem> r(lock); });
  waiters.emplace_back([&] { std::unique_lock<rwsem> w(lock); });
  std::this_thread::sleep_for(50ms);  // they are asleep by now
  ASSERT_EQ(child_uses(true, false), 0);
  lock.unlock();
  for (auto& t : waiters) t.join();
  EXPECT_EQ(lock.readers(), 0);
}

// fork() while another thread takes and releases the write lock over and over: the child's
// lock is held (by a thread it does not have) or free, never half released (the gate open but
// the next writer's turn not passed on, where readers got in and writers waited forever).
TYPED_TEST(PercpuRwsem, ForkWhileAnotherThreadLocksAndUnlocksNeverCopiesItHalfReleased) {
#if PERCPU_TSAN
  GTEST_SKIP() << "ThreadSanitizer's runtime is not usable in a child forked from threads";
#endif
  percpu::percpu_rwsem<TypeParam::value> lock;
  std::atomic<bool> stop{false};
  std::thread writer([&] {
    while (!stop.load(std::memory_order_relaxed)) {
      lock.lock();
      lock.unlock();
    }
  });
  int held = 0;
  for (int i = 0; i < 200; ++i) {
    const int status = percpu::test::in_child(
        [&] {
          if (!lock.try_lock_shared()) return 7;  // held by the parent's writer: stays held
          lock.unlock_shared();
          lock.lock();  // free: a writer must get it (alarm otherwise)
          lock.unlock();
          return 0;
        },
        5);
    if (status == 7) {
      ++held;
      continue;
    }
    ASSERT_EQ(status, 0) << "fork " << i;
  }
  stop = true;
  writer.join();
  this->RecordProperty("forks_while_held", held);
}

TYPED_TEST(PercpuRwsem, PoolSlotsWork) {
  percpu::pool<TypeParam::value> pool;
  percpu::percpu_rwsem<TypeParam::value> a(pool), b(pool);
  a.lock_shared();
  EXPECT_TRUE(b.try_lock());  // separate locks in one pool
  EXPECT_FALSE(a.try_lock());
  b.unlock();
  a.unlock_shared();
  EXPECT_TRUE(a.try_lock());
  a.unlock();
}

}  // namespace
