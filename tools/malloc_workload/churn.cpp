// Workload 4, thread churn: `threads` short-lived threads in all, at most twice the online CPUs
// alive at once. Each allocates 200 objects of mixed sizes, frees half of them, frees what the
// previous thread of its lane left behind (cross-thread frees of objects whose allocating thread
// has exited), and leaves its other half to the next one. Allocators with per-thread caches must
// reclaim each exiting thread's cache.
#include <unistd.h>

#include <thread>

#include "workload.h"

namespace percpu::workload {
namespace {

constexpr int kObjects = 200;

struct object {
  void* p;
  std::size_t size;
  std::uint64_t owner;
};

struct lane {
  object left[kObjects / 2];
  int count = 0;
};

void churn_thread(lane& l, std::uint64_t id) {
  rng r(id);
  object mine[kObjects];
  for (auto& o : mine) {
    o.size = mixed_size(r);
    o.owner = id;
    o.p = tagged_alloc(o.size, id);
    touch(o.p, o.size);
  }
  for (int i = 0; i < kObjects / 2; ++i) tagged_free(mine[i].p, mine[i].size, id);
  for (int i = 0; i < l.count; ++i) tagged_free(l.left[i].p, l.left[i].size, l.left[i].owner);
  for (int i = 0; i < kObjects / 2; ++i) l.left[i] = mine[kObjects / 2 + i];
  l.count = kObjects / 2;
}

}  // namespace

result run_churn(const params& p) {
  const int lanes = 2 * static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  std::vector<lane> state(static_cast<std::size_t>(lanes));
  std::vector<std::thread> alive(static_cast<std::size_t>(lanes));
  const double start = now_s();
  for (int t = 0; t < p.threads; ++t) {
    const auto i = static_cast<std::size_t>(t % lanes);
    if (alive[i].joinable()) alive[i].join();  // a lane's threads run one after another
    alive[i] =
        std::thread(churn_thread, std::ref(state[i]),
                    static_cast<std::uint64_t>(p.seed) * 100003 + static_cast<std::uint64_t>(t));
  }
  for (auto& t : alive)
    if (t.joinable()) t.join();
  for (auto& l : state)
    for (int i = 0; i < l.count; ++i) tagged_free(l.left[i].p, l.left[i].size, l.left[i].owner);
  result res;
  res.seconds = now_s() - start;
  res.unit = "threads/s";
  res.throughput = static_cast<double>(p.threads) / res.seconds;
  return res;
}

}  // namespace percpu::workload
