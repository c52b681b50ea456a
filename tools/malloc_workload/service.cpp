// Workload 1, the 400-thread service (after the 2015 "restartable sequences benchmarks" RFC): many
// threads (400 by default), of which only `active` serve a request at a time (a semaphore); a
// thread idles for `think_us` between its requests, as one waiting for its next client would. A
// request builds a working set of 50-400 objects of mixed sizes, freeing and replacing some as it
// goes, then frees it all; each thread also keeps a small session (32 objects) that lives across
// requests, replacing one object per request. Threads far outnumber CPUs: per-thread caches hold
// memory in every idle thread.
#include <semaphore.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <thread>

#include "workload.h"

namespace percpu::workload {
namespace {

struct object {
  void* p;
  std::size_t size;
};

constexpr int kSession = 32;
constexpr int kMaxWorkingSet = 400;

struct shared_state {
  sem_t permits;
  std::atomic<long> next_request{0};
  long requests;
  int think_us;
};

void serve_request(rng& r, std::uint64_t owner, object* set) {
  const int n = static_cast<int>(r.range(50, kMaxWorkingSet));
  for (int i = 0; i < n; ++i) {
    const std::size_t size = mixed_size(r);
    set[i] = {tagged_alloc(size, owner), size};
    touch(set[i].p, size);
    // Now and then an earlier object is done with and replaced.
    if (i > 8 && r.next() % 4 == 0) {
      object& victim = set[r.range(0, static_cast<std::size_t>(i - 1))];
      tagged_free(victim.p, victim.size, owner);
      victim.size = mixed_size(r);
      victim.p = tagged_alloc(victim.size, owner);
    }
  }
  for (int i = n - 1; i >= 0; --i) tagged_free(set[i].p, set[i].size, owner);
}

void thread_main(shared_state& s, int id, int seed, double* latencies_us) {
  rng r(static_cast<std::uint64_t>(seed) * 1000003 + static_cast<std::uint64_t>(id));
  const auto owner = static_cast<std::uint64_t>(id);
  object session[kSession];
  for (auto& o : session) {
    o.size = mixed_size(r);
    o.p = tagged_alloc(o.size, owner);
  }
  object set[kMaxWorkingSet];
  for (;;) {
    sem_wait(&s.permits);
    const long request = s.next_request.fetch_add(1, std::memory_order_relaxed);
    if (request >= s.requests) {
      sem_post(&s.permits);
      break;
    }
    const double start = now_s();
    serve_request(r, owner, set);
    object& old = session[r.next() % kSession];
    tagged_free(old.p, old.size, owner);
    old.size = mixed_size(r);
    old.p = tagged_alloc(old.size, owner);
    latencies_us[request] = (now_s() - start) * 1e6;
    sem_post(&s.permits);
    if (s.think_us > 0) usleep(static_cast<useconds_t>(s.think_us));
  }
  for (auto& o : session) tagged_free(o.p, o.size, owner);
}

}  // namespace

result run_service(const params& p) {
  shared_state s;
  const int active = p.active > 0 ? p.active : static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  sem_init(&s.permits, 0, static_cast<unsigned>(active));
  s.requests = p.requests;
  s.think_us = p.think_us;
  std::vector<double> latencies(static_cast<std::size_t>(p.requests));
  std::vector<std::thread> threads;
  threads.reserve(static_cast<std::size_t>(p.threads));
  const double start = now_s();
  for (int t = 0; t < p.threads; ++t)
    threads.emplace_back(thread_main, std::ref(s), t, p.seed, latencies.data());
  for (auto& t : threads) t.join();
  result res;
  res.seconds = now_s() - start;
  res.unit = "requests/s";
  res.throughput = static_cast<double>(p.requests) / res.seconds;
  res.p50_us = percentile(latencies, 50);
  res.p99_us = percentile(latencies, 99);
  sem_destroy(&s.permits);
  return res;
}

}  // namespace percpu::workload
