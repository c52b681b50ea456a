// Workloads 8-9, the standard allocator benchmarks' cross-thread patterns (after larson and
// xmalloc-test in mimalloc-bench; our own code):
//  - larson: `threads` threads each keep 5,000 live objects of random sizes (8-1,000 B) and
//    replace a random one `objects` times (larson's default: 500,000), then hand their objects
//    to a new thread, which frees them as it replaces them (`rounds` generations): frees of
//    objects whose thread has exited.
//    As in larson, an operation is a free and a malloc and little else: each object carries one
//    8-byte tag (its address and owner), checked before it is freed, so the allocator's time is
//    most of the time measured;
//  - xmalloc: `threads` producers allocate objects of 16-64 B in batches of 64 and pass the
//    batches through one shared queue to `threads` consumers, which free them: every free is
//    remote, under contention.
// xmalloc's objects carry workload.h's tags (both ends), checked before each free.
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "workload.h"

namespace percpu::workload {
namespace {

constexpr int kLarsonLive = 5000;

std::uint64_t light_tag(const void* p, std::uint64_t owner) {
  return reinterpret_cast<std::uintptr_t>(p) * 0x9E3779B97F4A7C15ull ^ owner;
}

struct larson_state {
  struct object {
    void* p = nullptr;
    std::size_t size = 0;
    std::uint64_t owner = 0;
  };
  object live[kLarsonLive];
};

void larson_free(larson_state::object& o) {
  std::uint64_t t;
  std::memcpy(&t, o.p, 8);
  if (t != light_tag(o.p, o.owner)) {
    std::fprintf(stderr, "percpu-malloc-workload: larson: an object's tag changed (%p)\n", o.p);
    std::_Exit(3);
  }
  std::free(o.p);
  o.p = nullptr;
}

void larson_generation(larson_state& s, long ops, std::uint64_t id) {
  rng r(id);
  for (long i = 0; i < ops; ++i) {
    auto& o = s.live[r.next() % kLarsonLive];
    if (o.p != nullptr) larson_free(o);
    o.size = r.range(8, 1000);
    o.owner = id;
    o.p = std::malloc(o.size);
    if (o.p == nullptr) {
      std::fprintf(stderr, "percpu-malloc-workload: larson: malloc returned NULL\n");
      std::_Exit(3);
    }
    const std::uint64_t t = light_tag(o.p, id);
    std::memcpy(o.p, &t, 8);
  }
}

}  // namespace

result run_larson(const params& p) {
  std::vector<larson_state> states(static_cast<std::size_t>(p.threads));
  const double start = now_s();
  for (long g = 0; g < p.rounds; ++g) {
    std::vector<std::thread> threads;
    threads.reserve(static_cast<std::size_t>(p.threads));
    for (int t = 0; t < p.threads; ++t)
      threads.emplace_back(
          larson_generation, std::ref(states[static_cast<std::size_t>(t)]), p.objects,
          static_cast<std::uint64_t>(p.seed) * 1000003 + static_cast<std::uint64_t>(g) * 4099 +
              static_cast<std::uint64_t>(t));
    for (auto& t : threads) t.join();
  }
  const double seconds = now_s() - start;
  for (auto& s : states)
    for (auto& o : s.live)
      if (o.p != nullptr) larson_free(o);
  result res;
  res.seconds = seconds;
  res.unit = "ops/s";
  res.throughput = static_cast<double>(p.threads) * static_cast<double>(p.rounds) *
                   static_cast<double>(p.objects) / seconds;
  return res;
}

namespace {

constexpr int kBatch = 64;

struct batch {
  void* p[kBatch];
  std::size_t size[kBatch];
  std::uint64_t owner;
};

struct shared_queue {
  std::mutex m;
  std::condition_variable ready, room;
  std::deque<batch*> q;
  std::size_t limit = 0;
  int producers_left = 0;
};

void xmalloc_produce(shared_queue& s, long batches, std::uint64_t id) {
  rng r(id);
  for (long i = 0; i < batches; ++i) {
    auto* b = new batch;
    b->owner = id;
    for (int k = 0; k < kBatch; ++k) {
      b->size[k] = r.range(16, 64);
      b->p[k] = tagged_alloc(b->size[k], id);
    }
    std::unique_lock<std::mutex> lock(s.m);
    s.room.wait(lock, [&] { return s.q.size() < s.limit; });
    s.q.push_back(b);
    s.ready.notify_one();
  }
  std::lock_guard<std::mutex> lock(s.m);
  if (--s.producers_left == 0) s.ready.notify_all();
}

long xmalloc_consume(shared_queue& s) {
  long freed = 0;
  for (;;) {
    batch* b;
    {
      std::unique_lock<std::mutex> lock(s.m);
      s.ready.wait(lock, [&] { return !s.q.empty() || s.producers_left == 0; });
      if (s.q.empty()) return freed;
      b = s.q.front();
      s.q.pop_front();
      s.room.notify_one();
    }
    for (int k = 0; k < kBatch; ++k) tagged_free(b->p[k], b->size[k], b->owner);
    freed += kBatch;
    delete b;
  }
}

}  // namespace

result run_xmalloc(const params& p) {
  shared_queue s;
  s.limit = static_cast<std::size_t>(4 * p.threads);
  s.producers_left = p.threads;
  const long batches = p.objects / kBatch;
  std::vector<std::thread> threads;
  std::vector<long> freed(static_cast<std::size_t>(p.threads), 0);
  const double start = now_s();
  for (int t = 0; t < p.threads; ++t) {
    threads.emplace_back(xmalloc_produce, std::ref(s), batches,
                         static_cast<std::uint64_t>(p.seed) * 7907 + static_cast<std::uint64_t>(t));
    threads.emplace_back(
        [&s, &freed, t] { freed[static_cast<std::size_t>(t)] = xmalloc_consume(s); });
  }
  for (auto& t : threads) t.join();
  long total = 0;
  for (long f : freed) total += f;
  result res;
  res.seconds = now_s() - start;
  res.unit = "frees/s";
  res.throughput = static_cast<double>(total) / res.seconds;
  return res;
}

}  // namespace percpu::workload
