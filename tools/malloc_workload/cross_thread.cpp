// Workloads 8-9, the standard allocator benchmarks' cross-thread programs, in the shapes of
// mimalloc-bench's originals (bench/larson/larson.cpp built as C++, bench/xmalloc-test), with a
// fixed amount of work instead of a fixed time so that runs compare (our code):
//  - larson (after larson.cpp: `larson 5 8 1000 5000 100 4141 <threads>`): the main thread
//    allocates `threads` x 5,000 blocks of 8-999 B (min + random % (max - min), as larson
//    rounds) with new[], shuffles them and replaces random ones 4 x `threads` x 5,000 times
//    (larson's warmup: each thread's blocks lie all over the heap, not in one run of it), then
//    each of `threads` threads replaces random blocks of its own 5,000
//    `objects` times (larson: rounds x blocks = 100 x 5,000), each a delete[] of a block, a
//    new[] of a random size and a write of its first 2 bytes (larson writes 'a', 'b'), and
//    starts the next generation's thread on its blocks as it exits (larson's thread hand-off:
//    the new thread frees blocks allocated by threads that have exited), `rounds` generations.
//    No block is read before it is freed, as in larson: an allocator whose free reads the block
//    pays for the cache miss (a copy that checked a tag there hid that cost from all of them).
//    Overlaps are caught after the run: each block's first 8 bytes hold its address and owner.
//  - xmalloc (after xmalloc-test: `xmalloc-test -w <threads> -t 5 -s 64`): `threads` producers
//    each allocate batches of 4,096 objects of 64 B, write each object's first 64 bytes (it
//    memsets min(size, 128)), and push the batch (itself malloc'ed) on one shared stack of at
//    most 100 batches; `threads` consumers pop batches and free every object and the batch:
//    every free is of another thread's object. Each producer makes `objects` / 4,096 batches.
//    One object of each batch carries tags at both ends, checked before it is freed.
#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "workload.h"

namespace percpu::workload {
namespace {

constexpr int kLarsonBlocks = 5000;  // larson's chunks per thread
constexpr std::size_t kLarsonMin = 8, kLarsonMax = 1000;

[[noreturn]] void fail(const char* what, const void* p) {
  std::fprintf(stderr, "percpu-malloc-workload: %s (%p)\n", what, p);
  std::_Exit(3);
}

struct larson_blocks {
  char* block[kLarsonBlocks] = {};
  std::uint64_t owner[kLarsonBlocks] = {};
};

char* larson_new(rng& r, std::uint64_t owner) {
  const std::size_t size = kLarsonMin + r.next() % (kLarsonMax - kLarsonMin);
  char* p = new char[size];
  // larson writes 2 bytes; the tag's 8 bytes lie in the same cache line (new[] returns at
  // least 8-aligned memory and every size is at least 8).
  const std::uint64_t t = tag_of(p, owner);
  std::memcpy(p, &t, 8);
  return p;
}

void larson_generation(larson_blocks& s, long ops, std::uint64_t seed, long generations_left,
                       std::vector<std::thread>& next, std::mutex& next_lock) {
  rng r(seed);
  for (long i = 0; i < ops; ++i) {
    const auto v = static_cast<std::size_t>(r.next() % kLarsonBlocks);
    delete[] s.block[v];
    s.owner[v] = seed;
    s.block[v] = larson_new(r, seed);
  }
  if (generations_left > 1) {
    // The hand-off: this thread starts its successor on the same blocks, and exits.
    std::lock_guard<std::mutex> lock(next_lock);
    next.emplace_back(larson_generation, std::ref(s), ops, seed * 6364136223846793005ull + 1,
                      generations_left - 1, std::ref(next), std::ref(next_lock));
  }
}

}  // namespace

result run_larson(const params& p) {
  std::vector<larson_blocks> states(static_cast<std::size_t>(p.threads));
  {
    // larson's warmup, by the main thread: every block allocated in turn, shuffled, then 4 x
    // as many random replacements; thread t gets the t-th run of 5,000 of the result.
    rng warm(static_cast<std::uint64_t>(p.seed));
    const std::size_t n = states.size() * kLarsonBlocks;
    std::vector<char*> all(n);
    for (char*& b : all) b = larson_new(warm, 0);
    for (std::size_t i = n; i > 1; --i) std::swap(all[i - 1], all[warm.next() % i]);
    for (std::size_t i = 0; i < 4 * n; ++i) {
      char*& victim = all[warm.next() % n];
      delete[] victim;
      victim = larson_new(warm, 0);
    }
    for (std::size_t i = 0; i < n; ++i)  // owner stays 0: the main thread's
      states[i / kLarsonBlocks].block[i % kLarsonBlocks] = all[i];
  }
  std::mutex next_lock;
  std::vector<std::thread> threads;
  threads.reserve(static_cast<std::size_t>(p.threads * p.rounds));
  const double start = now_s();
  {
    std::lock_guard<std::mutex> lock(next_lock);
    for (int t = 0; t < p.threads; ++t)
      threads.emplace_back(
          larson_generation, std::ref(states[static_cast<std::size_t>(t)]), p.objects,
          static_cast<std::uint64_t>(p.seed) * 1000003 + static_cast<std::uint64_t>(t) + 1,
          p.rounds, std::ref(threads), std::ref(next_lock));
  }
  // Joins every generation: a thread adds its successor before it exits, so the vector only
  // grows while threads before its end are still to be joined.
  for (std::size_t i = 0;; ++i) {
    std::thread t;
    {
      std::lock_guard<std::mutex> lock(next_lock);
      if (i == threads.size()) break;
      t = std::move(threads[i]);
    }
    t.join();
  }
  const double seconds = now_s() - start;
  for (auto& s : states)
    for (int i = 0; i < kLarsonBlocks; ++i) {
      std::uint64_t t;
      std::memcpy(&t, s.block[i], 8);
      if (t != tag_of(s.block[i], s.owner[i])) fail("larson: a block's tag changed", s.block[i]);
      delete[] s.block[i];
    }
  result res;
  res.seconds = seconds;
  res.unit = "ops/s";
  res.throughput = static_cast<double>(p.threads) * static_cast<double>(p.rounds) *
                   static_cast<double>(p.objects) / seconds;
  return res;
}

namespace {

constexpr int kBatchObjects = 4096;  // xmalloc-test's OBJECTS_PER_BATCH
constexpr std::size_t kObjectSize = 64;
constexpr std::size_t kStackLimit = 100;  // its batch_count_limit

struct batch {
  batch* next;
  std::uint64_t owner;
  void* objects[kBatchObjects];
};

struct shared_stack {
  std::mutex m;
  std::condition_variable ready, room;
  batch* top = nullptr;
  std::size_t count = 0;
  int producers_left = 0;
};

void xmalloc_produce(shared_stack& s, long batches, std::uint64_t id) {
  for (long i = 0; i < batches; ++i) {
    auto* b = static_cast<batch*>(std::malloc(sizeof(batch)));
    if (b == nullptr) fail("xmalloc: malloc returned NULL", nullptr);
    b->owner = id;
    for (int k = 0; k < kBatchObjects; ++k) {
      void* p = std::malloc(kObjectSize);
      if (p == nullptr) fail("xmalloc: malloc returned NULL", nullptr);
      std::memset(p, k & 0xFF, kObjectSize);
      b->objects[k] = p;
    }
    write_tags(b->objects[0], kObjectSize, id);
    std::unique_lock<std::mutex> lock(s.m);
    s.room.wait(lock, [&] { return s.count < kStackLimit; });
    b->next = s.top;
    s.top = b;
    ++s.count;
    s.ready.notify_one();
  }
  std::lock_guard<std::mutex> lock(s.m);
  if (--s.producers_left == 0) s.ready.notify_all();
}

long xmalloc_consume(shared_stack& s) {
  long freed = 0;
  for (;;) {
    batch* b;
    {
      std::unique_lock<std::mutex> lock(s.m);
      s.ready.wait(lock, [&] { return s.top != nullptr || s.producers_left == 0; });
      if (s.top == nullptr) return freed;
      b = s.top;
      s.top = b->next;
      --s.count;
      s.room.notify_one();
    }
    check_tags(b->objects[0], kObjectSize, b->owner);
    for (void* p : b->objects) std::free(p);
    std::free(b);
    freed += kBatchObjects;
  }
}

}  // namespace

result run_xmalloc(const params& p) {
  shared_stack s;
  s.producers_left = p.threads;
  const long batches = std::max(1L, p.objects / kBatchObjects);
  std::vector<std::thread> threads;
  std::vector<long> freed(static_cast<std::size_t>(p.threads), 0);
  const double start = now_s();
  for (int t = 0; t < p.threads; ++t) {
    threads.emplace_back(
        [&freed, &s, t] { freed[static_cast<std::size_t>(t)] = xmalloc_consume(s); });
    threads.emplace_back(xmalloc_produce, std::ref(s), batches,
                         static_cast<std::uint64_t>(p.seed) * 7907 + static_cast<std::uint64_t>(t));
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
