// Workload 2, a server pattern: objects are freed by other threads than the ones that allocated
// them. Each of `pairs` producers allocates objects of mixed sizes (16 B - 1 KiB, the messages a
// server passes between stages), tags them and hands them through a single-producer,
// single-consumer ring to its consumer, which checks and frees them.
#include <sched.h>
#include <unistd.h>

#include <atomic>
#include <thread>

#include "workload.h"

namespace percpu::workload {
namespace {

constexpr std::size_t kRing = 1024;  // a power of two

struct alignas(64) ring {
  struct slot {
    void* p;
    std::size_t size;
  };
  slot slots[kRing];
  alignas(64) std::atomic<std::size_t> head{0};  // written by the consumer
  alignas(64) std::atomic<std::size_t> tail{0};  // written by the producer
};

void produce(ring& q, long objects, std::uint64_t seed) {
  rng r(seed);
  std::size_t tail = 0;
  for (long i = 0; i < objects; ++i) {
    const std::size_t size = r.range(16, 1024);
    void* p = tagged_alloc(size, seed);
    while (tail - q.head.load(std::memory_order_acquire) == kRing) sched_yield();
    q.slots[tail % kRing] = {p, size};
    q.tail.store(++tail, std::memory_order_release);
  }
}

void consume(ring& q, long objects, std::uint64_t seed) {
  std::size_t head = 0;
  for (long i = 0; i < objects; ++i) {
    while (q.tail.load(std::memory_order_acquire) == head) sched_yield();
    const ring::slot s = q.slots[head % kRing];
    q.head.store(++head, std::memory_order_release);
    tagged_free(s.p, s.size, seed);
  }
}

}  // namespace

result run_producer_consumer(const params& p) {
  const int pairs = p.pairs > 0 ? p.pairs : static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  std::vector<ring> rings(static_cast<std::size_t>(pairs));
  std::vector<std::thread> threads;
  const double start = now_s();
  for (int i = 0; i < pairs; ++i) {
    const auto seed = static_cast<std::uint64_t>(p.seed) * 7919 + static_cast<std::uint64_t>(i);
    ring& q = rings[static_cast<std::size_t>(i)];
    threads.emplace_back(produce, std::ref(q), p.objects, seed);
    threads.emplace_back(consume, std::ref(q), p.objects, seed);
  }
  for (auto& t : threads) t.join();
  result res;
  res.seconds = now_s() - start;
  res.unit = "objects/s";
  res.throughput = static_cast<double>(p.objects) * pairs / res.seconds;
  return res;
}

}  // namespace percpu::workload
