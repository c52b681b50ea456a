// `percpu bench context-switch`: what registering an rseq area costs a program that switches
// context all the time. The getcpu_cache patch set's question ("what is the resulting context
// switch overhead?") and their answer (hackbench 26.63 s vs 26.52 s, standard deviation 0.4 s) set
// the method: A/B runs, alternating, of scheduler benchmarks with registration off and on, reported
// as mean and standard deviation with a verdict on whether the difference stands out of the noise.
//
// With an rseq area registered, the kernel updates it (cpu_id, node_id, mm_cid) on the way back
// to user space after every preemption or migration, and checks for a critical section to
// abort: that is the cost under test. The benchmarks (hackbench from rt-tests, `perf bench
// sched pipe` and `messaging`) run as their own processes in three configurations:
//   off     GLIBC_TUNABLES=glibc.pthread.rseq=0: nobody registers an area
//   glibc   glibc registers its area in every thread (the default since glibc 2.35)
//   percpu  the tunable, plus libpercpu_register.so preloaded: percpu's own area in every thread
// Each repetition runs every benchmark in every configuration, the order rotating, so drift on
// a noisy machine spreads over all three.
#include <fmt/core.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "bench/runner.h"
#include "commands.h"
#include "common/ab_stats.h"
#include "common/child_process.h"
#include "common/elf_footprint.h"
#include "percpu/runtime.h"

namespace percpu::cli {
namespace {

struct configuration {
  std::string name;
  std::string description;
  std::vector<std::string> set_env;
  std::string owner;     // the area's owner in every thread of the benchmark: none, glibc, percpu
  bool preload = false;  // libpercpu_register.so is preloaded (and reports the owner it saw)
};

// A comparison the table shows: `b` against `a`. The verdict counts those that isolate the
// registration (`registration_only`): the others also differ in the libraries loaded.
struct comparison {
  const char* a;
  const char* b;
  bool registration_only;
};

const std::vector<comparison> kComparisons = {
    {"off", "glibc", true},
    {"glibc+lib", "percpu", true},
    {"off", "percpu", false},
};

struct scheduler_benchmark {
  std::string name;     // e.g. "hackbench, processes"
  std::string program;  // "hackbench" or "perf"
  std::vector<std::string> args;
};

std::vector<scheduler_benchmark> scheduler_benchmarks(bool quick) {
  const std::string groups = quick ? "2" : "4";
  const std::string hack_loops = quick ? "200" : "300";
  const std::string pipe_loops = quick ? "20000" : "50000";
  const std::string msg_loops = quick ? "50" : "100";
  return {
      {"hackbench, processes", "hackbench", {"-p", "-g", groups, "-l", hack_loops}},
      {"hackbench, threads", "hackbench", {"-p", "-T", "-g", groups, "-l", hack_loops}},
      {"perf sched pipe, processes",
       "perf",
       {"bench", "-f", "simple", "sched", "pipe", "-l", pipe_loops}},
      {"perf sched pipe, threads",
       "perf",
       {"bench", "-f", "simple", "sched", "pipe", "-T", "-l", pipe_loops}},
      {"perf sched messaging, processes",
       "perf",
       {"bench", "-f", "simple", "sched", "messaging", "-g", groups, "-l", msg_loops}},
      {"perf sched messaging, threads",
       "perf",
       {"bench", "-f", "simple", "sched", "messaging", "-t", "-g", groups, "-l", msg_loops}},
  };
}

// The benchmark's own time in seconds: hackbench prints "Time: 0.348", `perf bench -f simple`
// the number alone. Negative when the output has neither.
double parse_seconds(const std::string& out) {
  std::istringstream lines(out);
  std::string line;
  double found = -1;
  while (std::getline(lines, line)) {
    if (line.rfind("Time:", 0) == 0) line = line.substr(5);
    char* end = nullptr;
    const double v = std::strtod(line.c_str(), &end);
    if (end != line.c_str() && v >= 0) {
      while (*end == ' ' || *end == '\t') ++end;
      if (*end == '\0') found = v;
    }
  }
  return found;
}

// Checks that a configuration registers what it claims; prints why not.
// Checks that a configuration registers what it claims; prints why not. `threaded` is a short
// run of a thread-mode benchmark.
bool verify_configuration(const configuration& c, const std::vector<std::string>& threaded) {
  if (c.preload) {
    // The preload reports, per process, the owner it found and the threads left without an area.
    child_request r;
    r.argv = threaded;
    r.set_env = c.set_env;
    r.unset_env = {"LD_PRELOAD", "GLIBC_TUNABLES"};  // as the measured runs
    r.set_env.push_back("PERCPU_REGISTER_REPORT=1");
    r.timeout_s = 60;
    const child_result got = run_child(r);
    const bool ok = got.ok() && got.err.find("owner " + c.owner) != std::string::npos &&
                    got.err.find(" 0 without an rseq area") != std::string::npos;
    if (!ok)
      std::cerr << fmt::format(
          "percpu bench context-switch: configuration {} expects an area owned by {} in every "
          "thread; the check run ({}) reported: {}\n",
          c.name, c.owner, got.describe(r.timeout_s), got.err);
    return ok;
  }
  // Without the preload, `percpu info` under the same environment says whether glibc registers.
  child_request r;
  r.argv = {self_dir() + "/percpu", "info", "--json"};
  r.set_env = c.set_env;
  r.unset_env = {"LD_PRELOAD", "GLIBC_TUNABLES"};
  r.timeout_s = 60;
  const child_result got = run_child(r);
  try {
    const auto info = nlohmann::json::parse(got.out);
    const int glibc_size = info["rseq"]["glibc_rseq_size"].get<int>();
    const bool ok = c.owner == "none" ? glibc_size == 0 : glibc_size > 0;
    if (!ok)
      std::cerr << fmt::format(
          "percpu bench context-switch: configuration {} expects glibc's __rseq_size {} 0, "
          "found {}\n",
          c.name, c.owner == "none" ? "==" : ">", glibc_size);
    return ok;
  } catch (const std::exception&) {
    std::cerr << "percpu bench context-switch: cannot read `percpu info --json`\n";
    return false;
  }
}

// The size rows: what registration costs in memory and code.
nlohmann::json size_facts(const std::string& register_lib) {
  nlohmann::json j;
  const registration_info reg = registration();
  j["rseq_area_bytes"] = reg.area_extent;
  j["glibc_area_note"] =
      "glibc's area lies inside its thread descriptor (struct pthread), which every thread has "
      "anyway";
  const std::string dir = self_dir();
  for (const auto& [key, file] : std::vector<std::pair<std::string, std::string>>{
           {"libpercpu", "libpercpu.so"},
           {"libpercpu_malloc", "libpercpu_malloc.so"},
           {"libpercpu_register", "libpercpu_register.so"}}) {
    std::string path = key == "libpercpu_register" ? register_lib : find_library_beside(dir, file);
    if (path.empty()) continue;
    std::string why;
    if (const auto f = read_elf_footprint(path, &why)) {
      j["libraries"][key] = {{"path", path},
                             {"code_bytes", f->code_bytes},
                             {"text_bytes", f->text_bytes},
                             {"tls_bytes_per_thread", f->tls_bytes},
                             {"file_bytes", f->file_bytes}};
    } else {
      j["libraries"][key] = {{"path", path}, {"error", why}};
    }
  }
  return j;
}

void print_size_facts(const nlohmann::json& j) {
  if (j["rseq_area_bytes"].get<int>() > 0)
    fmt::print(
        "\nSize: the rseq area is {} bytes per thread (glibc's lies inside its thread "
        "descriptor, which every thread has anyway; percpu's own is part of libpercpu.so's TLS "
        "below)\n",
        j["rseq_area_bytes"].get<int>());
  else
    fmt::print("\nSize: no rseq area is registered here (fallback mode); the libraries:\n");
  fmt::print("{:<24} {:>12} {:>12} {:>16} {:>12}\n", "library", "code bytes", ".text bytes",
             "TLS bytes/thread", "file bytes");
  if (!j.contains("libraries")) return;
  for (const auto& [name, lib] : j["libraries"].items()) {
    if (lib.contains("error")) {
      fmt::print("{:<24} {}\n", name + ".so", lib["error"].get<std::string>());
      continue;
    }
    fmt::print("{:<24} {:>12} {:>12} {:>16} {:>12}\n", name + ".so",
               lib["code_bytes"].get<std::uint64_t>(), lib["text_bytes"].get<std::uint64_t>(),
               lib["tls_bytes_per_thread"].get<std::uint64_t>(),
               lib["file_bytes"].get<std::uint64_t>());
  }
}

// Writes why the suite cannot run here (nothing failed: a prerequisite is missing) and returns
// the exit status: 0, or 1 when the JSON cannot be written.
int skip(const bench_options& options, const std::string& reason, const nlohmann::json& sizes) {
  fmt::print("percpu bench context-switch: skipped: {}\n", reason);
  print_size_facts(sizes);
  if (options.json_out.empty()) return 0;
  return write_text_file(
             options.json_out,
             nlohmann::json{{"suite", "context-switch"}, {"skipped", reason}, {"size", sizes}}.dump(
                 2) +
                 "\n")
             ? 0
             : 1;
}

}  // namespace

int bench_context_switch(const bench_options& options) {
  if (!can_write(options.json_out)) return 1;
  const std::string hackbench = find_program("hackbench");
  const std::string perf = find_program("perf");
  const std::string register_lib = find_library_beside(self_dir(), "libpercpu_register.so");
  if (register_lib.empty()) {
    std::cerr << "percpu bench context-switch: libpercpu_register.so not found beside this "
                 "build or install (build the whole project)\n";
    return 1;
  }
  std::vector<scheduler_benchmark> benches;
  for (auto& b : scheduler_benchmarks(options.quick)) {
    const std::string& path = b.program == "hackbench" ? hackbench : perf;
    if (path.empty()) continue;
    b.program = path;
    benches.push_back(b);
  }
  if (hackbench.empty())
    fmt::print("  not installed, skipped: hackbench (Debian package rt-tests)\n");
  if (perf.empty()) fmt::print("  not installed, skipped: perf (Debian package linux-perf)\n");
  if (benches.empty())
    return skip(options, "neither hackbench (rt-tests) nor perf (linux-perf) is installed",
                size_facts(register_lib));
  // The check compares registration off and on; where rseq(2) cannot register, "on" is
  // impossible (the machine's mode is what `percpu info` reports).
  if (const registration_info reg = registration(); reg.fallback)
    return skip(
        options,
        "rseq is unavailable here (" + reg.fallback_reason + "): registration cannot be turned on",
        size_facts(register_lib));

  const std::string tunable_off = "GLIBC_TUNABLES=glibc.pthread.rseq=0";
  const std::string preload = "LD_PRELOAD=" + register_lib;
  const std::vector<configuration> configs = {
      {"off", "GLIBC_TUNABLES=glibc.pthread.rseq=0: no rseq area", {tunable_off}, "none"},
      {"glibc", "glibc's area in every thread (the default)", {}, "glibc"},
      {"glibc+lib",
       "glibc's area, with libpercpu_register.so preloaded: percpu's libraries loaded, "
       "glibc's registration",
       {preload},
       "glibc",
       true},
      {"percpu",
       "percpu's own area in every thread (the tunable + libpercpu_register.so)",
       {tunable_off, preload},
       "percpu",
       true},
  };
  const std::vector<std::string> threaded =
      !hackbench.empty() ? std::vector<std::string>{hackbench, "-p", "-T", "-g", "1", "-l", "10"}
                         : std::vector<std::string>{perf, "bench", "sched", "messaging", "-t",
                                                    "-g", "1",     "-l",    "5"};
  for (const auto& c : configs)
    if (!verify_configuration(c, threaded)) return 1;

  const int reps = options.repetitions > 0 ? options.repetitions : (options.quick ? 8 : 20);
  fmt::print(
      "percpu bench context-switch: scheduler benchmarks with rseq registration off and on, "
      "{} alternating runs each (seconds: mean ± standard deviation; differences in percent, "
      "± the noise band: half-width of the 95% confidence interval, Welch's t; ! beyond it)\n",
      reps);
  for (const auto& c : configs) fmt::print("  {:<10} {}\n", c.name, c.description);
  fmt::print(
      "  glibc vs off and percpu vs glibc+lib differ in the registration alone; percpu vs off "
      "also in the libraries loaded (libpercpu.so, libstdc++: more to map, fork and tear down)\n");

  std::map<std::string, std::map<std::string, std::vector<double>>> seconds;
  const int total = reps * static_cast<int>(benches.size() * configs.size());
  int done = 0;
  bool failed = false;
  for (int rep = 0; rep < reps; ++rep)
    for (const auto& b : benches)
      for (std::size_t k = 0; k < configs.size(); ++k) {
        const configuration& c = configs[(k + static_cast<std::size_t>(rep)) % configs.size()];
        if (show_progress())
          std::cerr << fmt::format("\r[context-switch] {}/{}: run {}/{}, {} with {}          ",
                                   ++done, total, rep + 1, reps, b.name, c.name);
        child_request r;
        r.argv = {b.program};
        r.argv.insert(r.argv.end(), b.args.begin(), b.args.end());
        r.set_env = c.set_env;
        r.unset_env = {"LD_PRELOAD", "GLIBC_TUNABLES"};
        r.timeout_s = 300;
        const child_result got = run_child(r);
        const double s = got.ok() ? parse_seconds(got.out) : -1;
        if (s < 0) {
          std::cerr << fmt::format("\npercpu bench context-switch: {} with {} failed ({}): {}\n",
                                   b.name, c.name, got.describe(r.timeout_s), got.err);
          failed = true;
          continue;
        }
        seconds[b.name][c.name].push_back(s);
      }
  if (show_progress()) std::cerr << "\n";

  fmt::print("\n{:<32}", "benchmark");
  for (const auto& c : configs) fmt::print(" {:>17}", c.name + " (s)");
  for (const auto& cmp : kComparisons)
    fmt::print("  {:>17}", fmt::format("{} vs {}", cmp.b, cmp.a));
  fmt::print("\n");
  nlohmann::json rows = nlohmann::json::array();
  ab_verdict tally;
  for (const auto& b : benches) {
    auto& by_config = seconds[b.name];
    nlohmann::json row = {{"benchmark", b.name}, {"command", b.args}};
    fmt::print("{:<32}", b.name);
    for (const auto& c : configs) {
      const mean_sd m = describe_samples(by_config[c.name]);
      row["configs"][c.name] = {
          {"mean_s", m.mean}, {"sd_s", m.sd}, {"runs", m.n}, {"samples_s", by_config[c.name]}};
      fmt::print(" {:>17}",
                 m.n == 0 ? std::string("no runs") : fmt::format("{:.4f} ± {:.4f}", m.mean, m.sd));
    }
    for (const auto& cmp : kComparisons) {
      const ab_difference d =
          compare_means(describe_samples(by_config[cmp.a]), describe_samples(by_config[cmp.b]));
      const bool stands_out = d.enough_runs && !d.within_noise();
      row["comparisons"].push_back({{"a", cmp.a},
                                    {"b", cmp.b},
                                    {"registration_only", cmp.registration_only},
                                    {"percent", d.percent},
                                    {"noise_percent", d.noise_percent},
                                    {"verdict", d.verdict()}});
      fmt::print("  {:>17}", !d.enough_runs ? std::string("too few runs")
                                            : fmt::format("{:+.1f}% ±{:.1f}{}", d.percent,
                                                          d.noise_percent, stands_out ? "!" : ""));
      if (cmp.registration_only) tally.add(d);
    }
    fmt::print("\n");
    rows.push_back(row);
  }
  const std::string verdict = tally.text();
  fmt::print(
      "\nVerdict: {}. (The getcpu_cache patch set: hackbench 26.63 s with vs 26.52 s without, "
      "standard "
      "deviation 0.4 s: +0.4%, within the noise.)\n",
      verdict);
  const nlohmann::json sizes = size_facts(register_lib);
  print_size_facts(sizes);

  if (!options.json_out.empty()) {
    const nlohmann::json out{{"suite", "context-switch"},
                             {"repetitions", reps},
                             {"benchmarks", rows},
                             {"slower_beyond_noise", tally.slower},
                             {"faster_beyond_noise", tally.faster},
                             {"compared", tally.compared},
                             {"measurable_cost", tally.measurable_cost()},
                             {"verdict", verdict},
                             {"size", sizes}};
    if (!write_text_file(options.json_out, out.dump(2) + "\n")) return 1;
  }
  return failed ? 1 : 0;
}

}  // namespace percpu::cli
