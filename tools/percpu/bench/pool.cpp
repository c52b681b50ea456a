// `percpu bench pool`: resident memory of 1,000,000 per-CPU 8-byte counters laid out by the pool
// (cpu_id, mm_cid, and mm_cid on a pool sized for 256 CPUs) against the naive layouts (one
// cache-line-padded array per counter, sized by CPU_SETSIZE or by the possible CPUs), after 1, 2
// and 8 threads have each added to every counter; and ns per allocate+free of a small object,
// against a mutex-protected strided free list (the C per-CPU pools' design) in the same run.
#include <fmt/core.h>
#include <sched.h>
#include <sys/mman.h>
#include <unistd.h>

#include <percpu/percpu.h>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "bench/runner.h"
#include "commands.h"

namespace percpu::cli {
namespace {

constexpr int kCounters = 1000000;
// The CPU_SETSIZE layout touches a page per counter: measured on fewer counters, reported per
// counter (it scales linearly), so the run does not need gigabytes.
constexpr int kNaiveSetsizeCounters = 100000;

std::size_t resident_of(void* base, std::size_t bytes) {
  const std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> v((bytes + page - 1) / page);
  if (mincore(base, bytes, v.data()) != 0) return 0;
  std::size_t n = 0;
  for (unsigned char c : v) n += c & 1;
  return n * page;
}

// Every thread adds 1 to every counter through `add_one(counter)`.
template <class AddOne>
void run_threads(int threads, int counters, AddOne&& add_one) {
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&] {
      for (int i = 0; i < counters; ++i) add_one(i);
    });
  for (auto& th : pool) th.join();
}

template <index_mode M>
double pool_bytes_per_counter(int threads, int slots) {
  pool<M> p(pool_options{.stride = 16 << 20, .slots = slots, .debug = false});
  std::vector<percpu_ptr<std::intptr_t, M>> c;
  c.reserve(kCounters);
  for (int i = 0; i < kCounters; ++i) c.push_back(p.template allocate<std::intptr_t>());
  run_threads(threads, kCounters,
              [&](int i) { retry<M>([&](int index) { return add<M>(&c[i][index], 1, index); }); });
  return static_cast<double>(p.stats().resident_bytes) / kCounters;
}

// One array of `width` 64-byte slots per counter, indexed by sched_getcpu(), atomic adds.
double naive_bytes_per_counter(int threads, int width, int counters) {
  const std::size_t bytes = static_cast<std::size_t>(counters) * width * 64;
  void* m = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (m == MAP_FAILED) return -1;
  auto* base = static_cast<char*>(m);
  run_threads(threads, counters, [&](int i) {
    const int cpu = sched_getcpu();
    auto* slot = reinterpret_cast<std::intptr_t*>(
        base + (static_cast<std::size_t>(i) * width + static_cast<std::size_t>(cpu % width)) * 64);
    __atomic_fetch_add(slot, 1, __ATOMIC_RELAXED);
  });
  const double per = static_cast<double>(resident_of(base, bytes)) / counters;
  munmap(base, bytes);
  return per;
}

// ---- allocate+free of an 8-byte per-CPU object, side by side ----
percpu::pool<index_mode::cpu_id>* g_pool_cpu;
percpu::pool<index_mode::mm_cid>* g_pool_cid;

template <index_mode M>
std::uint64_t pool_allocate_free(percpu::pool<M>& pool, const std::atomic<bool>& stop) {
  return run_until(stop, [&] {
    auto p = pool.template allocate<std::int64_t>();
    benchmark::DoNotOptimize(&p[0]);
    pool.free(p);
  });
}
std::uint64_t pool_cpu_id(int, const std::atomic<bool>& stop) {
  return pool_allocate_free(*g_pool_cpu, stop);
}
std::uint64_t pool_mm_cid(int, const std::atomic<bool>& stop) {
  return pool_allocate_free(*g_pool_cid, stop);
}

// The design of the C per-CPU pools (librseq's mempool): one mutex over a free list of objects
// laid out with the same stride, and a zeroing allocation that writes every slot. Built here so
// that it is measured in the same run; `zero` = false is its non-zeroing allocation.
class mutex_strided_pool {
 public:
  mutex_strided_pool(int slots, std::size_t stride) : slots_(slots), stride_(stride) {
    base_ = static_cast<char*>(mmap(nullptr, static_cast<std::size_t>(slots) * stride,
                                    PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  }
  ~mutex_strided_pool() { munmap(base_, static_cast<std::size_t>(slots_) * stride_); }
  char* allocate(bool zero) {
    char* p;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (free_.empty()) {
        p = base_ + bump_;
        bump_ += 8;
      } else {
        p = free_.back();
        free_.pop_back();
      }
    }
    if (zero)
      for (int s = 0; s < slots_; ++s) std::memset(p + static_cast<std::size_t>(s) * stride_, 0, 8);
    return p;
  }
  void free(char* p) {
    std::lock_guard<std::mutex> lock(mutex_);
    free_.push_back(p);
  }

 private:
  int slots_;
  std::size_t stride_;
  char* base_;
  std::size_t bump_ = 0;
  std::mutex mutex_;
  std::vector<char*> free_;
};
mutex_strided_pool* g_mutex_pool;

std::uint64_t mutex_pool(bool zero, const std::atomic<bool>& stop) {
  return run_until(stop, [&] {
    char* p = g_mutex_pool->allocate(zero);
    benchmark::DoNotOptimize(p);
    g_mutex_pool->free(p);
  });
}
std::uint64_t mutex_pool_zeroed(int, const std::atomic<bool>& stop) {
  return mutex_pool(true, stop);
}
std::uint64_t mutex_pool_raw(int, const std::atomic<bool>& stop) {
  return mutex_pool(false, stop);
}

const std::vector<contender> kAllocators = {
    {"percpu::pool (cpu_id)", "pool cpu_id", pool_cpu_id},
    {"percpu::pool (mm_cid)", "pool mm_cid", pool_mm_cid},
    {"mutex free list, zeroed", "mutex+zero", mutex_pool_zeroed},
    {"mutex free list, not zeroed", "mutex", mutex_pool_raw},
};
const std::vector<int> kAllocThreads = {1, 2, 8};

}  // namespace

int bench_pool(const bench_options& options) {
  if (!can_write(options.json_out)) return 1;
  const int possible = machine_topology().cpu_id_bound;
  fmt::print(
      "percpu bench pool: resident bytes per 8-byte per-CPU counter ({} counters; every thread "
      "adds 1 to each; {} possible CPUs)\n\n",
      kCounters, possible);
  fmt::print("{:>7} {:>13} {:>13} {:>17} {:>15} {:>16}\n", "threads", "pool cpu_id", "pool mm_cid",
             "mm_cid, 256 slots", "padded x 1024", "padded x possible");
  nlohmann::json rows = nlohmann::json::array();
  for (int threads : {1, 2, 8}) {
    const double cpu = pool_bytes_per_counter<index_mode::cpu_id>(threads, 0);
    const double cid = pool_bytes_per_counter<index_mode::mm_cid>(threads, 0);
    const double cid256 =
        pool_bytes_per_counter<index_mode::mm_cid>(threads, std::max(256, possible));
    const double setsize = naive_bytes_per_counter(threads, CPU_SETSIZE, kNaiveSetsizeCounters);
    const double by_possible = naive_bytes_per_counter(threads, possible, kCounters);
    fmt::print("{:>7} {:>13.1f} {:>13.1f} {:>17.1f} {:>15.1f} {:>16.1f}\n", threads, cpu, cid,
               cid256, setsize, by_possible);
    rows.push_back({{"threads", threads},
                    {"pool_cpu_id", cpu},
                    {"pool_mm_cid", cid},
                    {"pool_mm_cid_256_slots", cid256},
                    {"padded_cpu_setsize", setsize},
                    {"padded_possible", by_possible}});
  }
  fmt::print("(the CPU_SETSIZE layout was measured on {} counters)\n\n", kNaiveSetsizeCounters);

  percpu::pool<index_mode::cpu_id> pool_cpu(pool_options{.debug = false});
  percpu::pool<index_mode::mm_cid> pool_cid(pool_options{.debug = false});
  mutex_strided_pool mutex_pool(possible, pool_cpu.stride());
  g_pool_cpu = &pool_cpu;
  g_pool_cid = &pool_cid;
  g_mutex_pool = &mutex_pool;
  const bench_plan plan = make_plan(options, {7, 0.2}, {3, 0.05});
  register_contenders(kAllocators, kAllocThreads, plan);
  const auto results = run_registered("pool");
  fmt::print(
      "allocate+free of an 8-byte per-CPU object: wall-clock ns per pair of the whole process, "
      "median of {} repetitions; ratios: the other's time / pool cpu_id's\n\n",
      plan.repetitions);
  std::fflush(stdout);
  print_thread_table(
      results, kAllocThreads, kAllocators, kAllocators[0].name,
      {{"mutex free list, zeroed", "mutex+zero/"}, {"mutex free list, not zeroed", "mutex/"}});

  if (!options.json_out.empty()) {
    nlohmann::json extra;
    extra["resident_bytes_per_counter"] = rows;
    if (!write_json(options.json_out, "pool", results, extra)) return 1;
  }
  return 0;
}

}  // namespace percpu::cli
