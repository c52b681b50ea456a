// Runs Google Benchmark benchmarks in-process and collects the median of their repetitions, so a
// suite can print ratios measured side by side in one run.
#pragma once

#include "common/output_file.h"  // can_write, write_text_file: every suite uses them

#include <benchmark/benchmark.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "commands.h"

namespace percpu::cli {

/// One benchmark's repetitions, in ns per iteration of its loop (real time). For a benchmark
/// run by several threads, Google Benchmark divides the wall time by the iterations of all
/// threads together: ns per operation of the whole process.
struct bench_result {
  std::string name;
  int threads = 1;
  std::vector<double> samples_ns;  ///< one per repetition
  double median_ns = 0;
  double min_ns = 0;
  double max_ns = 0;
  /// Spread of the repetitions in percent: 100 * (max - min) / median, rounded. Above 20 a
  /// result is marked noisy.
  int spread_percent() const {
    return median_ns > 0 ? static_cast<int>(100 * (max_ns - min_ns) / median_ns + 0.5) : 0;
  }
  bool noisy() const { return spread_percent() > 20; }
};

/// Repetitions and minimum time per repetition a suite should use.
struct bench_plan {
  int repetitions;
  double min_time_s;
};

/// The plan for `options` given the suite's defaults for a thorough and a quick run.
bench_plan make_plan(const bench_options& options, bench_plan thorough, bench_plan quick);

/// Runs `fn(cpu)` on each CPU of machine_topology().allowed_cpus in turn, the calling thread
/// pinned to it, then restores the thread's affinity. Skips a CPU the kernel refuses (offline
/// since startup, outside a changed cpuset); returns how many CPUs it ran on.
int on_each_allowed_cpu(const std::function<void(int cpu)>& fn);

/// True when suites should print their "\r[suite] step" progress lines to stderr: it is a
/// terminal, or a parent asked for them with PERCPU_BENCH_PROGRESS (the report reads them).
bool show_progress();

/// Registers a Google Benchmark benchmark (benchmark::RegisterBenchmark) and counts it, so that
/// run_registered() can show "done/total" in its progress line.
benchmark::internal::Benchmark* register_benchmark(const std::string& name,
                                                   std::function<void(benchmark::State&)> fn);

/// Runs every benchmark registered so far (benchmark::RegisterBenchmark) and returns their
/// results in registration order. Prints a progress line per benchmark to stderr when it is a
/// terminal or PERCPU_BENCH_PROGRESS is set ("\r[suite] done/total: name", no newline).
std::vector<bench_result> run_registered(const std::string& suite);

/// The loop one thread of a throughput benchmark runs: operations until `stop` is set, returning
/// how many it did. `thread` is 0 .. threads-1.
using thread_body = std::function<std::uint64_t(int thread, const std::atomic<bool>& stop)>;

/// Registers a benchmark of process throughput with `threads` threads, measured by wall clock:
/// each repetition starts the threads (outside the timing), releases them together, lets them
/// run body() for plan.min_time_s seconds, and reports wall time from release to the last
/// thread's finish divided by all threads' operations: ns per operation of the whole process.
/// (Google Benchmark's own ->Threads() averages per-thread times, which flatters short loops
/// when threads far outnumber CPUs and each finishes within one time slice.)
/// `before_run`, if set, runs before each repetition's threads start. The result is found with
/// find_result(results, name, threads).
///
/// With `cpu_time`, the result is instead the CPU time the threads spent in body() (each
/// thread's CLOCK_THREAD_CPUTIME_ID), summed, over their operations: CPU ns per operation, which
/// time spent waiting for a CPU does not inflate (for single-thread costs on a busy machine).
void register_throughput(const std::string& name, int threads, const bench_plan& plan,
                         thread_body body, std::function<void()> before_run = {},
                         bool cpu_time = false);

/// Runs `op()` in batches of 256 until `stop` is set; returns the operations done. The usual
/// thread_body of a throughput benchmark.
template <class Op>
std::uint64_t run_until(const std::atomic<bool>& stop, Op&& op) {
  std::uint64_t done = 0;
  while (!stop.load(std::memory_order_relaxed)) {
    for (int i = 0; i < 256; ++i) op();
    done += 256;
  }
  return done;
}

/// One contender of a thread-count suite: its benchmark (and JSON) name, its table column
/// label, and the loop each of its threads runs.
struct contender {
  const char* name;
  const char* label;
  std::uint64_t (*body)(int thread, const std::atomic<bool>& stop);
};

/// {benchmark name: table label} of `contenders`, for the JSON: the report's plots name each
/// line as the table names its column.
nlohmann::json contender_labels(const std::vector<contender>& contenders);

/// 1, 2, 4, ... up to 4x the allowed CPUs, the CPU count itself included: the thread counts of
/// the suites that show scaling up to the CPUs and past them.
std::vector<int> cpu_scaled_thread_counts();

/// Registers every contender at every thread count with register_throughput().
void register_contenders(const std::vector<contender>& contenders, const std::vector<int>& threads,
                         const bench_plan& plan, std::function<void()> before_run = {});

/// A ratio column: median of benchmark `slower` / median of the table's base benchmark.
struct ratio_column {
  const char* slower;
  const char* header;
};

/// Prints one row per thread count: each column's median ns (marked ~ when noisy), then each
/// ratio against `base` (a benchmark name). Ends with a note when any result was noisy.
void print_thread_table(const std::vector<bench_result>& results, const std::vector<int>& threads,
                        const std::vector<contender>& columns, const char* base,
                        const std::vector<ratio_column>& ratios);

/// Finds a result by name and thread count; nullptr if that benchmark did not run.
const bench_result* find_result(const std::vector<bench_result>& results, const std::string& name,
                                int threads = 1);

/// Writes results as JSON: {"suite": ..., "results": [{name, median_ns, min_ns, max_ns,
/// samples_ns}], plus `extra` merged in}. Returns false (after printing why) if it cannot.
bool write_json(const std::string& path, const std::string& suite,
                const std::vector<bench_result>& results, const nlohmann::json& extra);

}  // namespace percpu::cli
