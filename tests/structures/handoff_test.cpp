// Objects handed from one thread to another through the structures: a producer writes plain
// (non-atomic) fields of heap objects and pushes them; consumers pop, pop_all or drain them
// (from the producer's index and remotely), check and overwrite the fields and delete the
// objects. Every object must arrive once and intact. Under -fsanitize=thread (the tsan preset)
// this reports no data race only because the structures tell TSan the happens-before edges of
// their critical sections (percpu/tsan.h): a mutex-protected queue would report none either.
#include <gtest/gtest.h>

#include <percpu/buffer.h>
#include <percpu/freelist.h>
#include <percpu/memcpy_buffer.h>
#include <percpu/pool.h>
#include <percpu/slot_array.h>
#include <percpu/spinlock.h>
#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "modes.h"
#include "pin.h"

namespace {

using percpu::index_mode;

// Few enough for a TSan build on a loaded 2-CPU machine, enough for every path to hand some over.
constexpr long kParcels = 4000;

// The drainers' pause between rounds: a remote drain costs a fence (a membarrier system call),
// and a drainer that spins on them only slows the producer down.
void rest() {
  std::this_thread::sleep_for(std::chrono::microseconds(50));
}

struct parcel {
  parcel* next = nullptr;  // the freelist's link
  long serial = 0;
  long words[6] = {};
  std::string note;  // heap memory behind the object, handed over too
};

parcel* make(long serial) {
  auto* p = new parcel;
  p->serial = serial;
  for (long i = 0; i < 6; ++i) p->words[i] = serial * 7 + i;
  p->note = "parcel " + std::to_string(serial);
  return p;
}

// What every consumer does with an object it took: reads and writes it, then deletes it.
class receiver {
 public:
  explicit receiver(long n) : seen_(static_cast<std::size_t>(n)) {}

  void take(parcel* p) {
    bool intact = p->note == "parcel " + std::to_string(p->serial);
    for (long i = 0; i < 6; ++i) {
      intact = intact && p->words[i] == p->serial * 7 + i;
      p->words[i] = -1;  // the consumer's own writes
    }
    if (!intact) broken_.fetch_add(1);
    if (p->serial < 0 || p->serial >= static_cast<long>(seen_.size()) ||
        seen_[static_cast<std::size_t>(p->serial)].fetch_add(1) != 0)
      duplicates_.fetch_add(1);
    delete p;
    received_.fetch_add(1);
  }
  bool done() const { return received_.load() >= static_cast<long>(seen_.size()); }
  long received() const { return received_.load(); }
  long broken() const { return broken_.load(); }
  long duplicates() const { return duplicates_.load(); }

 private:
  std::vector<std::atomic<int>> seen_;
  std::atomic<long> received_{0}, broken_{0}, duplicates_{0};
};

// The popping consumer runs on the producer's CPU (CPU 0), so that pops find what the producer
// pushed in cpu_id mode; the draining one on another CPU where there is one (remote drains).
int other_cpu() {
  return std::thread::hardware_concurrency() > 1 ? 1 : 0;
}

template <class T>
class Handoff : public ::testing::Test {};
TYPED_TEST_SUITE(Handoff, percpu::test::Modes);

TYPED_TEST(Handoff, BufferPopsAndDrainsWhatAnotherThreadWrote) {
  percpu::buffer<parcel*, TypeParam::value> buf(256);
  receiver got(kParcels);
  std::atomic<long> popped{0}, drained{0};
  std::thread producer([&] {
    percpu::test::pinned pin(0);
    for (long s = 0; s < kParcels; ++s) {
      parcel* p = make(s);
      while (!buf.push(p)) std::this_thread::yield();  // full: the consumers catch up
    }
  });
  std::thread popper([&] {
    percpu::test::pinned pin(0);
    while (!got.done()) {
      if (parcel* p = buf.pop()) {
        got.take(p);
        popped.fetch_add(1);
      } else {
        std::this_thread::yield();
      }
    }
  });
  std::thread drainer([&] {
    percpu::test::pinned pin(other_cpu());
    while (!got.done()) {
      for (int i = 0; i < buf.slots(); ++i)
        for (parcel* p : buf.drain(i)) {
          got.take(p);
          drained.fetch_add(1);
        }
      rest();
    }
  });
  producer.join();
  popper.join();
  drainer.join();
  EXPECT_EQ(got.received(), kParcels);
  EXPECT_EQ(got.broken(), 0);
  EXPECT_EQ(got.duplicates(), 0);
  EXPECT_EQ(popped.load() + drained.load(), kParcels);
  std::printf("buffer: %ld popped, %ld drained\n", popped.load(), drained.load());
}

TYPED_TEST(Handoff, FreelistPopsPopAllsAndDrainsWhatAnotherThreadWrote) {
  percpu::freelist<parcel, &parcel::next, TypeParam::value> list;
  receiver got(kParcels);
  std::atomic<long> popped{0}, chained{0}, drained{0};
  std::thread producer([&] {
    percpu::test::pinned pin(0);
    for (long s = 0; s < kParcels; ++s) {
      list.push(make(s));
      if ((s & 63) == 0) std::this_thread::yield();  // let the consumers run on CPU 0
    }
  });
  std::thread popper([&] {
    percpu::test::pinned pin(0);
    for (long round = 0; !got.done(); ++round) {
      if (round % 4 == 3) {  // every fourth round takes the whole chain
        for (parcel* p = list.pop_all(); p;) {
          parcel* next = p->next;
          got.take(p);
          chained.fetch_add(1);
          p = next;
        }
      } else if (parcel* p = list.pop()) {
        got.take(p);
        popped.fetch_add(1);
      } else {
        std::this_thread::yield();
      }
    }
  });
  std::thread drainer([&] {
    percpu::test::pinned pin(other_cpu());
    while (!got.done()) {
      for (int i = 0; i < list.slots(); ++i)
        for (parcel* p = list.drain(i); p;) {
          parcel* next = p->next;
          got.take(p);
          drained.fetch_add(1);
          p = next;
        }
      rest();
    }
  });
  producer.join();
  popper.join();
  drainer.join();
  EXPECT_EQ(got.received(), kParcels);
  EXPECT_EQ(got.broken(), 0);
  EXPECT_EQ(got.duplicates(), 0);
  std::printf("freelist: %ld popped, %ld by pop_all, %ld drained\n", popped.load(), chained.load(),
              drained.load());
}

// A record carries the object's address: the object is handed over through the copy.
TYPED_TEST(Handoff, MemcpyBufferRecordsCarryObjectsAnotherThreadWrote) {
  struct record {
    parcel* p;
    long serial;
  };
  percpu::memcpy_buffer<record, TypeParam::value> buf(256);
  receiver got(kParcels);
  std::thread producer([&] {
    percpu::test::pinned pin(0);
    for (long s = 0; s < kParcels; ++s) {
      const record r{make(s), s};
      while (!buf.push(r)) std::this_thread::yield();
    }
  });
  std::thread popper([&] {
    percpu::test::pinned pin(0);
    record r{};
    while (!got.done()) {
      if (buf.pop(r)) {
        got.take(r.p);
      } else {
        std::this_thread::yield();
      }
    }
  });
  std::thread drainer([&] {
    percpu::test::pinned pin(other_cpu());
    while (!got.done()) {
      for (int i = 0; i < buf.slots(); ++i)
        for (const record& r : buf.drain(i)) got.take(r.p);
      rest();
    }
  });
  producer.join();
  popper.join();
  drainer.join();
  EXPECT_EQ(got.received(), kParcels);
  EXPECT_EQ(got.broken(), 0);
  EXPECT_EQ(got.duplicates(), 0);
}

// Objects of a pool written by one thread, freed, and handed out (cleared) to others, which
// write them too; a drain of the caches moves freed objects to the central lists meanwhile.
TYPED_TEST(Handoff, PoolObjectsAreReusedByOtherThreads) {
  constexpr index_mode M = TypeParam::value;
  percpu::pool<M> pool;
  struct object {
    long words[8];
  };
  std::atomic<long> dirty{0};
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t)
    threads.emplace_back([&] {
      percpu::test::pinned pin(0);  // one index: the threads reuse each other's objects
      for (int i = 0; i < 3000; ++i) {
        percpu::percpu_ptr<object, M> o = pool.template allocate<object>();
        for (long& w : o[0].words) {
          if (w != 0) dirty.fetch_add(1);  // handed out zeroed
          w = i + 1;
        }
        pool.free(o);
      }
    });
  std::thread drainer([&] {
    percpu::test::pinned pin(other_cpu());
    while (!stop.load()) {
      pool.drain_caches(0);
      rest();
    }
  });
  for (auto& th : threads) th.join();
  stop = true;
  drainer.join();
  EXPECT_EQ(dirty.load(), 0);
}

// Plain data guarded by the per-CPU spinlock, written by threads that share an index.
TYPED_TEST(Handoff, SpinlockGuardsPlainDataAcrossThreads) {
  constexpr long kUpdates = 5000;
  percpu::spinlock<TypeParam::value> lock;
  percpu::slot_array<long> data(lock.slots());
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t)
    threads.emplace_back([&, t] {
      percpu::test::pinned pin(t == 2 ? other_cpu() : 0);
      for (long i = 0; i < kUpdates; ++i) {
        if (i & 1) {
          typename percpu::spinlock<TypeParam::value>::guard g(lock);
          data[g.index()] = data[g.index()] + 1;
        } else {
          const int index = lock.lock();
          data[index] = data[index] + 1;
          lock.unlock(index);
        }
      }
    });
  for (auto& th : threads) th.join();
  long sum = 0;
  for (int i = 0; i < data.size(); ++i) sum += data[i];
  EXPECT_EQ(sum, 3 * kUpdates);
}

}  // namespace
