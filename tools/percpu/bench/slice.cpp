// `percpu bench slice`: what the time-slice extension (Linux 7.0+, slice.h) is worth to locks
// when threads outnumber CPUs. Four threads per online CPU contend for one short critical
// section (about 1 µs of work on shared words) under a spinning lock, a spinning lock whose
// waiters yield, and std::mutex, each with and without slice_extended, the six configurations
// alternating within every repetition.
//
// Per configuration: acquisitions per second; the hold time (lock taken to released: what a
// waiter waits for), its median, p99 and p99.9; holds longer than 50 µs, which a 1 µs section
// only reaches when its holder was preempted while holding; and the kernel's answer to the requests
// (granted extensions, and grants the holder gave back in time with rseq_slice_yield(2)).
// Medians over the repetitions, with the spread of the throughput. Where the kernel does not
// offer the extension the suite says why and measures nothing.
#include <fmt/core.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include <percpu/percpu.h>

#include "commands.h"
#include "common/ab_stats.h"

namespace percpu::cli {
namespace {

// A test-and-test-and-set spinlock, as applications write them: the lock whose waiters burn their
// time slices while its holder is preempted. With Yield, a waiter gives its CPU up after 200
// spins (sched_yield), which lets a preempted holder back sooner; without, it spins until the
// scheduler takes the CPU from it.
template <bool Yield>
class plain_spinlock {
 public:
  void lock() noexcept {
    for (unsigned spins = 0;; ++spins) {
      if (!word_.load(std::memory_order_relaxed) &&
          !word_.exchange(true, std::memory_order_acquire))
        return;
      if (!Yield || spins < 200) {
#if defined(__x86_64__)
        __builtin_ia32_pause();
#endif
      } else {
        sched_yield();
      }
    }
  }
  bool try_lock() noexcept {
    return !word_.exchange(true, std::memory_order_acquire);
  }
  void unlock() noexcept {
    word_.store(false, std::memory_order_release);
  }

 private:
  std::atomic<bool> word_{false};
};

struct run_result {
  double acquisitions_per_s = 0;
  double p50_hold_us = 0;
  double p99_hold_us = 0;
  double p999_hold_us = 0;
  std::uint64_t long_holds = 0;  // holds above kLongHoldUs
  std::uint64_t requests = 0, granted = 0, yielded = 0;
};

// A hold this long was preempted: ten times the extension's longest grant (50 µs at most; 5 µs by
// default) and 20 times the section.
constexpr double kLongHoldUs = 50;

// The shared data the section updates: 8 words on one line; 1,024 dependent updates take about
// 1 µs on our machines.
struct alignas(64) shared_words {
  std::uint64_t w[8];
};

template <class Lock>
run_result run_one(Lock& lock, int threads, double seconds) {
  shared_words data{};
  std::atomic<bool> go{false}, stop{false};
  std::vector<std::vector<float>> holds(static_cast<std::size_t>(threads));
  std::vector<std::uint64_t> counts(static_cast<std::size_t>(threads), 0);
  std::vector<slice_stats> stats(static_cast<std::size_t>(threads));
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      (void)enable_slice_extension();  // each thread asks once, before the clock starts
      const slice_stats before = this_thread_slice_stats();
      auto& mine = holds[static_cast<std::size_t>(t)];
      mine.reserve(1 << 20);
      while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
      std::uint64_t n = 0;
      while (!stop.load(std::memory_order_relaxed)) {
        lock.lock();
        const auto t0 = std::chrono::steady_clock::now();
        for (int k = 0; k < 1024; ++k) data.w[k % 8] = data.w[(k + 3) % 8] * 31 + k;
        const auto t1 = std::chrono::steady_clock::now();
        lock.unlock();
        if (mine.size() < mine.capacity())
          mine.push_back(std::chrono::duration<float, std::micro>(t1 - t0).count());
        ++n;
        for (int k = 0; k < 64; ++k) asm volatile("" ::: "memory");  // a little work outside
      }
      counts[static_cast<std::size_t>(t)] = n;
      const slice_stats after = this_thread_slice_stats();
      stats[static_cast<std::size_t>(t)] = {after.requests - before.requests,
                                            after.granted - before.granted,
                                            after.yielded - before.yielded};
    });
  const auto start = std::chrono::steady_clock::now();
  go.store(true, std::memory_order_release);
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  stop = true;
  for (auto& th : pool) th.join();
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  run_result r;
  std::vector<float> all;
  std::uint64_t total = 0;
  for (int t = 0; t < threads; ++t) {
    total += counts[static_cast<std::size_t>(t)];
    all.insert(all.end(), holds[static_cast<std::size_t>(t)].begin(),
               holds[static_cast<std::size_t>(t)].end());
    r.requests += stats[static_cast<std::size_t>(t)].requests;
    r.granted += stats[static_cast<std::size_t>(t)].granted;
    r.yielded += stats[static_cast<std::size_t>(t)].yielded;
  }
  r.acquisitions_per_s = static_cast<double>(total) / elapsed;
  if (!all.empty()) {
    std::sort(all.begin(), all.end());
    r.p50_hold_us = all[all.size() / 2];
    r.p99_hold_us = all[std::min(all.size() - 1, all.size() * 99 / 100)];
    r.p999_hold_us = all[std::min(all.size() - 1, all.size() * 999 / 1000)];
    r.long_holds = static_cast<std::uint64_t>(
        all.end() - std::upper_bound(all.begin(), all.end(), static_cast<float>(kLongHoldUs)));
  }
  return r;
}

struct configuration {
  std::string lock;  // "spin", "spin+yield" or "mutex"
  bool extension;
};

template <class Lock>
run_result run_with(bool extension, int threads, double seconds) {
  if (extension) {
    slice_extended<Lock> l;
    return run_one(l, threads, seconds);
  }
  Lock l;
  return run_one(l, threads, seconds);
}

run_result run_configuration(const configuration& c, int threads, double seconds) {
  if (c.lock == "spin") return run_with<plain_spinlock<false>>(c.extension, threads, seconds);
  if (c.lock == "spin+yield") return run_with<plain_spinlock<true>>(c.extension, threads, seconds);
  return run_with<std::mutex>(c.extension, threads, seconds);
}

}  // namespace

int bench_slice(const bench_options& options) {
  const slice_support s = enable_slice_extension();
  nlohmann::json out = {{"suite", "slice"},
                        {"kernel_offers", s.kernel_offers},
                        {"enabled", s.enabled},
                        {"reason", s.reason}};
  if (!s.enabled) {
    fmt::print("percpu bench slice: not measured: time-slice extension {}\n", s.reason);
    out["measured"] = false;
    if (!options.json_out.empty()) std::ofstream(options.json_out) << out.dump(2) << "\n";
    return 0;
  }
  const int cpus = static_cast<int>(std::thread::hardware_concurrency());
  const int threads = 4 * std::max(1, cpus);
  const int reps = options.repetitions > 0 ? options.repetitions : (options.quick ? 3 : 5);
  const double seconds = options.quick ? 0.5 : 2.0;
  const std::vector<configuration> configs = {{"spin", false},       {"spin", true},
                                              {"spin+yield", false}, {"spin+yield", true},
                                              {"mutex", false},      {"mutex", true}};
  fmt::print(
      "percpu bench slice: {} threads on {} CPUs contend for one ~1 µs critical section, {} s "
      "per run, {} repetitions alternating (medians; sprd: (max-min)/median of throughput)\n",
      threads, cpus, seconds, reps);

  std::vector<std::vector<run_result>> results(configs.size());
  for (int rep = 0; rep < reps; ++rep)
    for (std::size_t k = 0; k < configs.size(); ++k) {
      const std::size_t i = (k + static_cast<std::size_t>(rep)) % configs.size();  // rotate
      results[i].push_back(run_configuration(configs[i], threads, seconds));
    }

  fmt::print("\n{:<11} {:<10} {:>14} {:>6} {:>9} {:>9} {:>10} {:>12} {:>8} {:>8}\n", "lock",
             "extension", "acquisitions/s", "sprd", "p50 µs", "p99 µs", "p99.9 µs", "holds > 50µs",
             "granted", "yielded");
  out["measured"] = true;
  out["threads"] = threads;
  out["cpus"] = cpus;
  out["long_hold_us"] = kLongHoldUs;
  std::vector<double> thr(configs.size()), p999(configs.size()), longh(configs.size());
  for (std::size_t i = 0; i < configs.size(); ++i) {
    std::vector<double> a, p50, q99, q999, lh, gr, yi;
    for (const auto& r : results[i]) {
      a.push_back(r.acquisitions_per_s);
      p50.push_back(r.p50_hold_us);
      q99.push_back(r.p99_hold_us);
      q999.push_back(r.p999_hold_us);
      lh.push_back(static_cast<double>(r.long_holds));
      gr.push_back(static_cast<double>(r.granted));
      yi.push_back(static_cast<double>(r.yielded));
    }
    const double m = median(a);
    const double spread =
        m > 0 ? (*std::max_element(a.begin(), a.end()) - *std::min_element(a.begin(), a.end())) / m
              : 0;
    thr[i] = m;
    p999[i] = median(q999);
    longh[i] = median(lh);
    fmt::print(
        "{:<11} {:<10} {:>14.0f} {:>5.0f}% {:>9.2f} {:>9.2f} {:>10.2f} {:>12.0f} {:>8.0f} "
        "{:>8.0f}\n",
        configs[i].lock, configs[i].extension ? "requested" : "off", m, 100 * spread, median(p50),
        median(q99), p999[i], longh[i], median(gr), median(yi));
    out["rows"].push_back({{"lock", configs[i].lock},
                           {"extension", configs[i].extension},
                           {"acquisitions_per_s", a},
                           {"p50_hold_us", p50},
                           {"p99_hold_us", q99},
                           {"p999_hold_us", q999},
                           {"long_holds", lh},
                           {"granted", gr},
                           {"yielded", yi}});
  }
  fmt::print("\n");
  for (std::size_t i = 0; i + 1 < configs.size(); i += 2)
    fmt::print(
        "{}: with the extension {:.2f}x the throughput, p99.9 hold {:.2f}x, holds over "
        "50 µs (a preempted holder) {:.0f} against {:.0f}\n",
        configs[i].lock, thr[i] > 0 ? thr[i + 1] / thr[i] : 0,
        p999[i] > 0 ? p999[i + 1] / p999[i] : 0, longh[i + 1], longh[i]);
  if (!options.json_out.empty()) std::ofstream(options.json_out) << out.dump(2) << "\n";
  return 0;
}

}  // namespace percpu::cli
