#include "bench/runner.h"

#include "common/ab_stats.h"

#include <percpu/topology.h>

#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <thread>

#include <sched.h>
#include <time.h>

#include <unistd.h>

namespace percpu::cli {
namespace {

const std::string kThroughputTag = "@threads=";

int g_registered = 0;  // benchmarks registered since the last run_registered()

// Collects the individual repetitions (not Google Benchmark's own aggregates).
class collecting_reporter : public benchmark::BenchmarkReporter {
 public:
  collecting_reporter(std::string suite, int total) : suite_(std::move(suite)), total_(total) {}

  bool ReportContext(const Context&) override { return true; }

  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& run : runs) {
      if (run.run_type != Run::RT_Iteration || run.error_occurred) continue;
      std::string name = run.run_name.function_name;
      int threads = static_cast<int>(run.threads);
      // Throughput benchmarks carry their thread count in the name (see register_throughput).
      if (const auto at = name.rfind(kThroughputTag); at != std::string::npos) {
        threads = std::stoi(name.substr(at + kThroughputTag.size()));
        name.resize(at);
      }
      const std::string key = name + "/threads:" + std::to_string(threads);
      if (index_.find(key) == index_.end()) {
        index_[key] = results_.size();
        bench_result r;
        r.name = name;
        r.threads = threads;
        results_.push_back(r);
        if (show_progress())
          std::cerr << "\r[" << suite_ << "] " << results_.size() << "/" << total_ << ": " << key
                    << std::string(20, ' ') << std::flush;
      }
      results_[index_[key]].samples_ns.push_back(run.GetAdjustedRealTime());
    }
  }

  std::vector<bench_result> take() {
    if (show_progress()) std::cerr << "\r" << std::string(70, ' ') << "\r" << std::flush;
    for (auto& r : results_) {
      if (r.samples_ns.empty()) continue;
      r.median_ns = median(r.samples_ns);
      const auto [lo, hi] = std::minmax_element(r.samples_ns.begin(), r.samples_ns.end());
      r.min_ns = *lo;
      r.max_ns = *hi;
    }
    return std::move(results_);
  }

 private:
  std::string suite_;
  int total_;
  std::vector<bench_result> results_;
  std::map<std::string, size_t> index_;
};

}  // namespace

bool show_progress() {
  return isatty(STDERR_FILENO) || std::getenv("PERCPU_BENCH_PROGRESS") != nullptr;
}

bench_plan make_plan(const bench_options& options, bench_plan thorough, bench_plan quick) {
  bench_plan plan = options.quick ? quick : thorough;
  if (options.repetitions > 0) plan.repetitions = options.repetitions;
  return plan;
}

std::vector<bench_result> run_registered(const std::string& suite) {
  static bool initialized = false;
  if (!initialized) {
    int argc = 1;
    char name[] = "percpu";
    char* argv[] = {name, nullptr};
    benchmark::Initialize(&argc, argv);
    initialized = true;
  }
  collecting_reporter reporter(suite, g_registered);
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::ClearRegisteredBenchmarks();
  g_registered = 0;
  return reporter.take();
}

benchmark::internal::Benchmark* register_benchmark(const std::string& name,
                                                   std::function<void(benchmark::State&)> fn) {
  ++g_registered;
  return benchmark::RegisterBenchmark(name.c_str(), std::move(fn));
}

namespace {
std::int64_t thread_cpu_ns() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}
}  // namespace

void register_throughput(const std::string& name, int threads, const bench_plan& plan,
                         thread_body body, std::function<void()> before_run, bool cpu_time) {
  const double window_s = plan.min_time_s;
  // One round: returns wall ns from release to the last thread's finish, and the operations.
  auto round = [=](double seconds) {
    if (before_run) before_run();
    std::atomic<bool> go{false}, stop{false};
    std::atomic<std::uint64_t> ops{0};
    std::atomic<std::int64_t> last_finish_ns{0}, cpu_ns{0};
    std::vector<std::thread> pool;
    pool.reserve(threads);
    for (int t = 0; t < threads; ++t)
      pool.emplace_back([&, t] {
        while (!go.load(std::memory_order_acquire)) sched_yield();
        const std::int64_t cpu_start = thread_cpu_ns();
        ops.fetch_add(body(t, stop), std::memory_order_relaxed);
        cpu_ns.fetch_add(thread_cpu_ns() - cpu_start, std::memory_order_relaxed);
        const std::int64_t now = std::chrono::steady_clock::now().time_since_epoch().count();
        std::int64_t seen = last_finish_ns.load();
        while (seen < now && !last_finish_ns.compare_exchange_weak(seen, now)) {
        }
      });
    const auto start = std::chrono::steady_clock::now();
    go.store(true, std::memory_order_release);
    std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
    stop.store(true, std::memory_order_release);
    for (auto& th : pool) th.join();
    const double elapsed_ns =
        cpu_time ? static_cast<double>(cpu_ns.load())
                 : static_cast<double>(last_finish_ns.load() - start.time_since_epoch().count());
    return std::pair<double, std::uint64_t>(elapsed_ns, ops.load());
  };
  auto fn = [=](benchmark::State& s) {
    round(std::min(0.02, window_s));  // warm-up: page faults, first-use registration, caches
    for (auto _ : s) {
      const auto [elapsed_ns, n] = round(window_s);
      // One Google Benchmark iteration stands for one operation of the process.
      s.SetIterationTime(n ? elapsed_ns / 1e9 / static_cast<double>(n) : 0);
    }
  };
  register_benchmark(name + kThroughputTag + std::to_string(threads), fn)
      ->Iterations(1)
      ->Repetitions(plan.repetitions)
      ->UseManualTime();
}

const bench_result* find_result(const std::vector<bench_result>& results, const std::string& name,
                                int threads) {
  for (const auto& r : results)
    if (r.name == name && r.threads == threads) return &r;
  return nullptr;
}

std::vector<int> cpu_scaled_thread_counts() {
  const int cpus = std::max<int>(1, static_cast<int>(machine_topology().allowed_cpus.size()));
  std::vector<int> t;
  for (int n = 1; n < 4 * cpus; n *= 2) t.push_back(n);
  t.push_back(4 * cpus);
  if (std::find(t.begin(), t.end(), cpus) == t.end()) {
    t.push_back(cpus);
    std::sort(t.begin(), t.end());
  }
  return t;
}

void register_contenders(const std::vector<contender>& contenders, const std::vector<int>& threads,
                         const bench_plan& plan, std::function<void()> before_run) {
  for (int n : threads)
    for (const auto& c : contenders) register_throughput(c.name, n, plan, c.body, before_run);
}

void print_thread_table(const std::vector<bench_result>& results, const std::vector<int>& threads,
                        const std::vector<contender>& columns, const char* base,
                        const std::vector<ratio_column>& ratios) {
  std::cout << fmt::format("{:>7}", "threads");
  for (const auto& c : columns) std::cout << fmt::format(" {:>13}", c.label);
  for (const auto& r : ratios) std::cout << fmt::format("  {:>15}", r.header);
  std::cout << "\n";
  bool noisy = false;
  for (int n : threads) {
    std::cout << fmt::format("{:>7}", n);
    for (const auto& c : columns) {
      const bench_result* r = find_result(results, c.name, n);
      noisy = noisy || (r && r->noisy());
      std::cout << fmt::format(
          " {:>13}", r ? fmt::format("{:.2f}{}", r->median_ns, r->noisy() ? "~" : "") : "-");
    }
    const bench_result* ours = find_result(results, base, n);
    for (const auto& ratio : ratios) {
      const bench_result* other = find_result(results, ratio.slower, n);
      std::cout << fmt::format(
          "  {:>15}",
          ours && other ? fmt::format("{:.1f}x", other->median_ns / ours->median_ns) : "-");
    }
    std::cout << "\n";
  }
  if (noisy) std::cout << "~ marks results whose repetitions varied by more than 20%\n";
  std::cout << std::flush;
}

nlohmann::json contender_labels(const std::vector<contender>& contenders) {
  nlohmann::json labels = nlohmann::json::object();
  for (const contender& c : contenders) labels[c.name] = c.label;
  return labels;
}

bool write_json(const std::string& path, const std::string& suite,
                const std::vector<bench_result>& results, const nlohmann::json& extra) {
  nlohmann::json j = extra;
  j["suite"] = suite;
  for (const auto& r : results) {
    j["results"].push_back({{"name", r.name},
                            {"threads", r.threads},
                            {"median_ns", r.median_ns},
                            {"min_ns", r.min_ns},
                            {"max_ns", r.max_ns},
                            {"noisy", r.noisy()},
                            {"samples_ns", r.samples_ns}});
  }
  return write_text_file(path, j.dump(2) + "\n");
}

int on_each_allowed_cpu(const std::function<void(int cpu)>& fn) {
  cpu_set_t saved;
  if (sched_getaffinity(0, sizeof saved, &saved) != 0) return 0;
  int ran = 0;
  for (int cpu : machine_topology().allowed_cpus) {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    if (sched_setaffinity(0, sizeof one, &one) != 0) continue;
    fn(cpu);
    ++ran;
  }
  sched_setaffinity(0, sizeof saved, &saved);
  return ran;
}

}  // namespace percpu::cli
