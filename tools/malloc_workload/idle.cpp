// Workload 10, idle after a burst (the shape of a batch job or a server after a load spike):
// `threads` threads together allocate `megabytes` MiB of small objects (16-512 B, each thread
// its own), free them all, and the process then idles for `idle_ms` milliseconds without
// calling the allocator. The end RSS (main.cpp's end_rss_kib, read after the idle time) is the
// memory the allocator still holds for a program that has stopped allocating: returned only if
// its release happens during the frees, or by a thread of its own.
#include <time.h>

#include <thread>
#include <utility>
#include <vector>

#include "workload.h"

namespace percpu::workload {
namespace {

void burst(std::size_t bytes, std::uint64_t id) {
  rng r(id);
  std::vector<std::pair<void*, std::size_t>> live;
  live.reserve(bytes / 200);
  for (std::size_t total = 0; total < bytes;) {
    const std::size_t size = r.range(16, 512);
    live.emplace_back(tagged_alloc(size, id), size);
    total += size;
  }
  // Freed in random order, as a cache or a table of records empties: spans fill with holes
  // before they empty.
  for (std::size_t i = live.size(); i > 1; --i) std::swap(live[i - 1], live[r.next() % i]);
  for (auto& [p, size] : live) tagged_free(p, size, id);
  // (the vector's own buffer is freed when it leaves this scope, before the idle time)
}

}  // namespace

result run_idle(const params& p) {
  const std::size_t per_thread = static_cast<std::size_t>(p.megabytes) * (std::size_t{1} << 20) /
                                 static_cast<std::size_t>(p.threads);
  const double start = now_s();
  std::vector<std::thread> threads;
  for (int t = 0; t < p.threads; ++t)
    threads.emplace_back(burst, per_thread, static_cast<std::uint64_t>(p.seed) * 31 + t);
  for (auto& t : threads) t.join();
  result res;
  res.seconds = now_s() - start;
  res.unit = "MiB/s";
  res.throughput = static_cast<double>(p.megabytes) / res.seconds;
  timespec idle{p.idle_ms / 1000, static_cast<long>(p.idle_ms % 1000) * 1000000L};
  while (nanosleep(&idle, &idle) != 0) {
  }
  return res;
}

}  // namespace percpu::workload
