// The percpu command: info, bench, stress, deny-rseq.
#include <fmt/core.h>
#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>

#include "commands.h"
#include "stress/harness.h"

namespace {

const char* const kCommands[] = {"info", "bench", "stress", "deny-rseq"};

// A first word that is neither an option nor a command: CLI11 would only say that a
// subcommand is required.
bool refuse_unknown_command(int argc, char** argv) {
  if (argc < 2 || argv[1][0] == '-') return false;
  for (const char* c : kCommands)
    if (std::strcmp(argv[1], c) == 0) return false;
  std::cerr << "percpu: unknown command '" << argv[1]
            << "'; the commands are info, bench, stress and deny-rseq (percpu --help)\n";
  return true;
}

// Whole numbers only: says "not a number" before the range check can say "out of range".
const CLI::Validator kWholeNumber(
    [](std::string& text) -> std::string {
      const bool digits =
          !text.empty() && text.find_first_not_of("0123456789") == std::string::npos;
      return digits ? std::string() : "'" + text + "' is not a number (digits 0-9 only)";
    },
    "NUMBER");

// A whole number in [lo, hi].
template <class T>
CLI::Option* number(CLI::Option* o, T lo, T hi) {
  return o->check(kWholeNumber)->check(CLI::Range(lo, hi));
}

// The exit status after the command's own: output that could not be written (a full disk,
// /dev/full, a closed pipe) is an error, not a success.
int with_output_checked(int status) {
  errno = 0;
  std::cout.flush();  // synchronized with stdio: this flushes stdout, setting errno on failure
  const bool cout_ok = static_cast<bool>(std::cout);
  const bool stdout_ok = std::fflush(stdout) == 0 && !std::ferror(stdout);
  if (cout_ok && stdout_ok) return status;
  const int err = errno;
  std::cerr << "percpu: cannot write the output"
            << (err != 0 ? std::string(": ") + std::strerror(err) : std::string()) << "\n";
  return status != 0 ? status : 1;
}

int run(int argc, char** argv) {
  if (refuse_unknown_command(argc, argv)) return 2;
  CLI::App app{"percpu: userspace per-CPU data through restartable sequences (rseq)"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "percpu " PERCPU_VERSION);

  auto* info = app.add_subcommand("info", "Show the rseq registration, usable fields and topology");
  bool info_as_json = false;
  info->add_flag("--json", info_as_json, "Print one JSON object");

  auto* bench = app.add_subcommand(
      "bench", "Run one benchmark suite, or with none the full report (every suite, plots)");
  bench->require_subcommand(0, 1);
  percpu::cli::bench_options options;
  bench->add_flag("--quick", options.quick, "Fewer, shorter repetitions");
  number(
      bench->add_option("--repetitions", options.repetitions, "Repetitions per benchmark (median)"),
      1, 1000);
  bench->add_option("--json", options.json_out,
                    "Write one suite's raw results to this JSON file (the report writes its own)");
  std::string report_dir = "percpu-report";
  std::vector<std::string> report_suites;
  const std::vector<std::string> suite_names = {"getcpu",  "ops",           "counter", "readmostly",
                                                "metrics", "list",          "pool",    "malloc",
                                                "slice",   "context-switch"};
  bench->add_option("--out", report_dir, "Report folder (no suite named; default percpu-report)");
  bench
      ->add_option("--suites", report_suites,
                   "Report only these suites, comma-separated (no suite named; default all)")
      ->delimiter(',')
      ->check(CLI::IsMember(suite_names));
  auto* getcpu = bench->add_subcommand(
      "getcpu", "Cost of asking for the current CPU: percpu vs glibc, vDSO, system call, insns");
  auto* ops = bench->add_subcommand(
      "ops",
      "Every per-CPU primitive, both index modes, 1 and N threads: percpu vs a hand-written "
      "minimal rseq sequence, librseq (when built with it) and atomic instructions");
  auto* counter = bench->add_subcommand(
      "counter", "A counter incremented by 1-256 threads: percpu vs atomics, locks, thread_local");

  auto* readmostly = bench->add_subcommand(
      "readmostly",
      "Read-mostly primitives at 1 to 4x the CPUs: percpu_rwsem vs pthread_rwlock_t, "
      "std::shared_mutex, tbb, absl, liburcu; percpu_ref vs std::atomic and std::shared_ptr; a "
      "99%-read mix with writer latency");

  auto* metrics = bench->add_subcommand(
      "metrics",
      "The batched counter and the histogram at 1 to 4x the CPUs: percpu_counter add, read, sum "
      "and limited_add vs percpu::counter, std::atomic and tbb::combinable; histogram record vs "
      "prometheus-cpp and a mutex");

  auto* list = bench->add_subcommand(
      "list", "A free list shared by 1-256 threads: percpu vs a Treiber stack and a mutex list");

  auto* pool = bench->add_subcommand(
      "pool", "Resident memory of per-CPU counters: pool vs padded arrays; allocate+free cost");

  auto* malloc_suite = bench->add_subcommand(
      "malloc",
      "Allocation workloads (service, producer/consumer, pair latency, thread churn, large blocks, "
      "larson and xmalloc in their originals' shapes, idle after a burst, a random mix) under "
      "glibc, jemalloc (default and percpu arenas), tcmalloc, mimalloc and percpu malloc: "
      "throughput, latency, peak RSS (--allocators to choose)");
  // The malloc suite's allocators: its own option, and the report's (no suite named), which
  // passes them on to the suite it runs; both fill options.allocators.
  malloc_suite
      ->add_option("--allocators", options.allocators,
                   "Only these allocators, comma- or space-separated (default: all installed)")
      ->delimiter(',')
      ->check(CLI::IsMember(percpu::cli::kMallocAllocators));
  bench
      ->add_option("--allocators", options.allocators,
                   "The report's malloc suite: only these allocators, comma-separated (no suite "
                   "named; default all installed)")
      ->delimiter(',')
      ->check(CLI::IsMember(percpu::cli::kMallocAllocators));
  bool malloc_list = false;
  malloc_suite->add_flag("--list-allocators", malloc_list,
                         "Print the allocators found (name, library to preload, MALLOC_CONF), a "
                         "line each, tab-separated, and run nothing");

  auto* slice = bench->add_subcommand(
      "slice",
      "Time-slice extension (Linux 7.0+): threads outnumbering CPUs contend for a spinlock and a "
      "mutex, with and without extension requests: throughput, hold times, preempted holders");

  auto* context_switch = bench->add_subcommand(
      "context-switch",
      "What registering rseq costs context switches: hackbench and perf bench sched with "
      "registration off, glibc's and percpu's, alternating; plus bytes per thread and code size");
  // The suite's options may come after its name too (percpu bench getcpu --quick).
  for (CLI::App* suite :
       {getcpu, ops, counter, readmostly, metrics, list, pool, malloc_suite, slice, context_switch})
    suite->fallthrough();

  auto* stress = app.add_subcommand(
      "stress",
      "Run the per-CPU structures under preemption, migration, signals, fork and remote drains, "
      "and check that nothing is lost or duplicated");
  percpu::cli::stress_options sopt;
  const std::vector<std::string> all_structures = {
      "counter", "freelist", "buffer",    "memcpy_buffer", "spinlock", "rwsem",
      "ref",     "batched",  "histogram", "pool",          "malloc"};
  bool short_form = false, no_signals = false, no_migrate = false, no_yield = false,
       no_fork = false, no_drain = false;
  stress
      ->add_option("--structure", sopt.structures,
                   "Structures to run, comma- or space-separated (default: all)")
      ->delimiter(',')
      ->check(CLI::IsMember(all_structures));
  stress->add_option("--mode", sopt.modes, "Index modes, comma- or space-separated (default: both)")
      ->delimiter(',')
      ->check(CLI::IsMember({"cpu_id", "mm_cid"}));
  number(
      stress->add_option("--threads", sopt.threads, "Worker threads (default: 4 per CPU, >= 16)"),
      1, 4096);
  number(stress->add_option("--reps", sopt.reps, "Operations per worker (default: 1000000)"), 1L,
         1000000000L);
  number(stress->add_option("--repetitions", sopt.repetitions, "Runs of each structure and mode"),
         1, 1000);
  number(stress->add_option("--inject-loops", sopt.inject_loops,
                            "Delay loop iterations at each injection point inside the critical "
                            "sections (builds with PERCPU_INJECT_DELAYS: cmake --preset stress)"),
         0u, 1000000u);
  number(stress->add_option(
             "--timeout", sopt.timeout_s,
             "Seconds after which a run that has not finished fails (hung; default 300)"),
         1, 86400);
  stress->add_flag("--short", short_form, "CI form: 8 workers x 20000 operations");
  stress->add_flag("--no-signals", no_signals, "No signal storm");
  stress->add_flag("--no-migrate", no_migrate, "No migrating thread");
  stress->add_flag("--no-yield", no_yield, "Workers never call sched_yield");
  stress->add_flag("--no-fork", no_fork, "No fork in the middle of a run");
  stress->add_flag("--no-drain", no_drain, "No remote drains (counter: no resets)");
  stress->add_flag("--require-aborts", sopt.require_aborts,
                   "Fail a run in rseq mode in which no critical section was aborted (use with "
                   "--inject-loops in a stress-preset build: without injection, aborts are rare)");
  stress->add_option("--json", sopt.json_out, "Write the results to this JSON file");

  auto* deny = app.add_subcommand(
      "deny-rseq", "Run a command with rseq(2) failing (seccomp), to exercise fallback mode");
  std::string err_name = "ENOSYS";
  std::vector<std::string> command;
  deny->add_option("--errno", err_name, "Error the denied system calls return")
      ->check(CLI::IsMember({"ENOSYS", "EPERM", "EINVAL"}));
  std::string denied = "rseq";
  deny->add_option("--deny", denied,
                   "What fails: rseq (fallback mode), membarrier (rseq works, fences use "
                   "migration), or both")
      ->check(CLI::IsMember({"rseq", "membarrier", "both"}));
  deny->add_option("command", command, "Command and arguments")->required();
  deny->prefix_command();

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // CLI11 prints the message; --help and --version are successes. Every usage error exits 2,
    // as percpu's own do (CLI11's codes, 105-109, would say nothing more).
    return app.exit(e) == 0 ? 0 : 2;
  }

  if (info->parsed()) {
    const auto j = percpu::cli::info_json();
    if (info_as_json) {
      std::cout << j.dump(2) << "\n";
    } else {
      percpu::cli::print_info(j);
    }
    return 0;
  }
  // --out and --suites belong to the report; with a suite named they would be ignored.
  if (bench->parsed() && !bench->get_subcommands().empty() &&
      (bench->count("--out") > 0 || bench->count("--suites") > 0)) {
    std::cerr << "percpu bench: --out and --suites are for the report (no suite named); to "
                 "report several suites use --suites a,b (comma-separated)\n";
    return 2;
  }
  // --allocators belongs to the malloc suite and to the report, which passes it on.
  if (bench->parsed() && bench->count("--allocators") > 0 && !bench->get_subcommands().empty() &&
      !malloc_suite->parsed()) {
    std::cerr << "percpu bench: --allocators is for the malloc suite and the report (no suite "
                 "named)\n";
    return 2;
  }
  if (bench->parsed() && report_dir.empty()) {
    std::cerr << "percpu bench: --out needs a folder name\n";
    return 2;
  }
#if !PERCPU_CLI_HAS_BENCH
  // A build without PERCPU_BUILD_BENCH (tools/percpu/CMakeLists.txt): one that injects delay
  // loops inside every critical section, whose timings would time the delays, or the debug
  // pass's, whose -O0 timings would mean nothing.
  if (bench->parsed()) {
#ifdef PERCPU_INJECT_DELAYS
    const char* const why =
        ": it injects delay loops inside its critical sections "
        "(PERCPU_INJECT_DELAYS, for `percpu stress`), which bench would time";
#else
    const char* const why = "";
#endif
    std::cerr << "percpu bench: this percpu was built without its benchmarks "
                 "(PERCPU_BUILD_BENCH=OFF)"
              << why << "; run bench from a build with them (cmake --preset release)\n";
    return 2;
  }
#else
  if (malloc_suite->parsed() && malloc_list)  // a listing for scripts: no header line
    return percpu::cli::list_malloc_allocators(options);
  if (bench->parsed() && !bench->get_subcommands().empty())
    fmt::print("percpu bench: on {}\n", percpu::cli::environment_line(percpu::cli::info_json()));
  if (getcpu->parsed()) return percpu::cli::bench_getcpu(options);
  if (ops->parsed()) return percpu::cli::bench_ops(options);
  if (counter->parsed()) return percpu::cli::bench_counter(options);
  if (readmostly->parsed()) return percpu::cli::bench_readmostly(options);
  if (metrics->parsed()) return percpu::cli::bench_metrics(options);
  if (list->parsed()) return percpu::cli::bench_list(options);
  if (pool->parsed()) return percpu::cli::bench_pool(options);
  if (malloc_suite->parsed()) return percpu::cli::bench_malloc(options);
  if (slice->parsed()) return percpu::cli::bench_slice(options);
  if (context_switch->parsed()) return percpu::cli::bench_context_switch(options);
  if (bench->parsed()) {
    if (!options.json_out.empty()) {
      std::cerr << "percpu bench: --json is for one suite; the report writes results.json in "
                   "its folder (--out)\n";
      return 2;
    }
    return percpu::cli::bench_report(options, report_dir, report_suites);
  }
#endif
  if (stress->parsed()) {
    if (sopt.structures.empty()) sopt.structures = all_structures;
    if (sopt.modes.empty()) sopt.modes = {"cpu_id", "mm_cid"};
    if (short_form) {
      if (sopt.threads == 0) sopt.threads = 8;
      if (sopt.reps == 0) sopt.reps = 20000;
    }
    sopt.signals = !no_signals;
    sopt.migrate = !no_migrate;
    sopt.yield = !no_yield;
    sopt.fork_child = !no_fork;
    sopt.drain = !no_drain;
    return percpu::cli::run_stress(sopt);
  }
  if (deny->parsed()) {
    if (command.empty()) command = deny->remaining();
    const int err = err_name == "EPERM" ? EPERM : err_name == "EINVAL" ? EINVAL : ENOSYS;
    return percpu::cli::deny_rseq_exec(err, denied != "membarrier", denied != "rseq", command);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return with_output_checked(run(argc, argv));
}
