// Entry points of the percpu command's subcommands.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace percpu::cli {

/// `percpu info`: the machine's rseq facts as a JSON object (also used by the report).
nlohmann::json info_json();
/// Prints info_json() for people.
void print_info(const nlohmann::json& info);
/// One line naming what a benchmark ran on, from info_json(): "Linux RELEASE (MACHINE), glibc
/// VERSION, online CPUs LIST, rseq mode MODE (area registered by OWNER)". Every `percpu bench`
/// suite prints it first, and the report's header carries it.
std::string environment_line(const nlohmann::json& info);

/// `percpu deny-rseq`: installs a seccomp filter that fails rseq(2) (when `rseq`) and/or
/// membarrier(2) (when `membarrier`) with `err`, then execs `argv`. Returns only on failure (the
/// exit status to use).
int deny_rseq_exec(int err, bool rseq, bool membarrier, const std::vector<std::string>& argv);

/// The allocators `percpu bench malloc` knows, by the names --allocators takes (glibc's malloc,
/// jemalloc with its default and its per-CPU arenas, tcmalloc, mimalloc, percpu malloc).
inline const std::vector<std::string> kMallocAllocators = {
    "glibc", "jemalloc", "jemalloc-percpu", "tcmalloc", "mimalloc", "percpu"};

/// Options shared by the benchmark suites.
struct bench_options {
  bool quick = false;    ///< fewer, shorter repetitions
  int repetitions = 0;   ///< 0: the suite's default
  std::string json_out;  ///< write raw results here when not empty
  /// The malloc suite's allocators (the report passes them on to it); empty: every one installed.
  std::vector<std::string> allocators;
};

/// `percpu bench getcpu`: returns the process exit status.
int bench_getcpu(const bench_options& options);

/// `percpu bench ops`: returns the process exit status.
int bench_ops(const bench_options& options);

/// `percpu bench counter`: returns the process exit status.
int bench_counter(const bench_options& options);

/// `percpu bench readmostly`: percpu_rwsem and percpu_ref against the locks and counts programs
/// use instead; returns the process exit status.
int bench_readmostly(const bench_options& options);

/// `percpu bench metrics`: percpu_counter (the batched counter) against percpu::counter,
/// std::atomic and tbb::combinable: add, read, sum, limited_add.
int bench_metrics(const bench_options& options);

/// `percpu bench list`: returns the process exit status.
int bench_list(const bench_options& options);

/// `percpu bench pool`: returns the process exit status.
int bench_pool(const bench_options& options);

/// `percpu bench malloc`: the allocation workloads under each allocator (all found, or those
/// named in options.allocators); returns the process exit status (1 when a run under percpu
/// malloc failed).
int bench_malloc(const bench_options& options);

/// `percpu bench malloc --list-allocators`: prints the allocators that `bench malloc` would
/// compare (all found, or those named in options.allocators), a line each, "name<TAB>library to
/// preload (empty for glibc)<TAB>MALLOC_CONF (jemalloc's variant)", and notes the missing ones on
/// stderr; returns 0. For scripts that run other programs under the same allocators
/// (scripts/malloc-originals.sh).
int list_malloc_allocators(const bench_options& options);

/// `percpu bench slice`: locks with and without time-slice extension requests, where the kernel
/// offers the extension (otherwise it says why and measures nothing); returns the exit status.
int bench_slice(const bench_options& options);

/// `percpu bench context-switch`: scheduler benchmarks (hackbench, perf bench sched) with rseq
/// registration off, glibc's and percpu's, alternating; returns the process exit status (1 when
/// a configuration cannot be verified or a run failed).
int bench_context_switch(const bench_options& options);

/// `percpu bench` with no suite: runs the suites in `suites` (every suite when empty), each as
/// a child process, and writes the report folder `out_dir` (report.md, PNG plots, raw JSON);
/// returns the process exit status (1 when a suite failed or the report cannot be written).
int bench_report(const bench_options& options, const std::string& out_dir,
                 const std::vector<std::string>& suites);

}  // namespace percpu::cli
