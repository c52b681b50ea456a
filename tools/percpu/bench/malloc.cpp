// `percpu bench malloc`: the allocation workloads of percpu-malloc-workload (the 400-thread
// service, producer/consumer, single-thread pair latency by size, thread churn), each run as its
// own process under LD_PRELOAD of every allocator found (glibc, jemalloc default and
// percpu_arena:percpu, gperftools tcmalloc, mimalloc, percpu malloc). Repetitions alternate the
// allocators, so drift on a noisy machine spreads over all of them; tables give medians, the
// spread, and the ratios against the allocator's targets (docs/malloc.md).
//
// Google Benchmark runs benchmarks inside its own process; an allocator chosen by LD_PRELOAD
// needs one process per run, so this suite drives processes itself.
#include <fmt/core.h>
#include <sched.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/runner.h"
#include "commands.h"
#include "common/ab_stats.h"
#include "common/child_process.h"

namespace percpu::cli {
namespace {

struct allocator {
  std::string name;
  std::string library;  // empty: glibc, no preload
  std::string conf;     // MALLOC_CONF for jemalloc
};

// Debian's multiarch library directory of this build.
#if defined(__x86_64__)
constexpr const char* kLibDir = "/usr/lib/x86_64-linux-gnu/";
#elif defined(__aarch64__)
constexpr const char* kLibDir = "/usr/lib/aarch64-linux-gnu/";
#else
constexpr const char* kLibDir = "/usr/lib/";
#endif

// The allocators to compare, and a note on each one missing.
std::vector<allocator> find_allocators(const std::string& dir, std::vector<std::string>& missing) {
  std::vector<allocator> all;
  all.push_back({"glibc", "", ""});
  const std::string lib = kLibDir;
  auto add = [&](const std::string& name, const std::string& file, const std::string& conf,
                 const char* package) {
    if (readable(lib + file)) {
      all.push_back({name, lib + file, conf});
    } else {
      missing.push_back(name + " (" + lib + file + "; Debian package " + package + ")");
    }
  };
  // jemalloc's per-CPU arenas still keep a cache per thread (tcache) in front of them.
  add("jemalloc", "libjemalloc.so.2", "", "libjemalloc2");
  add("jemalloc-percpu", "libjemalloc.so.2", "percpu_arena:percpu", "libjemalloc2");
  add("tcmalloc", "libtcmalloc_minimal.so.4", "", "libtcmalloc-minimal4");
  add("mimalloc", "libmimalloc.so.2", "", "libmimalloc2.0");
  const std::string ours = find_library_beside(dir, "libpercpu_malloc.so");
  if (ours.empty()) {
    missing.push_back("percpu (libpercpu_malloc.so not found next to this build or install)");
  } else {
    all.push_back({"percpu", ours, ""});
  }
  return all;
}

struct workload {
  std::string name;               ///< the program's workload
  std::vector<std::string> args;  ///< its options
  std::string label = name;       ///< the row set in the tables (a workload at a thread count)
};

// larson and xmalloc (in the shapes of mimalloc-bench's originals) at 2, 64 and 400 threads.
// larson's generations replace 500,000 blocks per thread, as the original's (rounds x blocks),
// at least two generations and about `work` replacements in all (64 threads: 6.4 x `work`); at
// 400 threads, a shape the originals' suite does not run, fewer, so that two make `work`.
// (With 78,000 per generation at 64 threads, the hand-off's cost weighed 6x what it weighs in
// the original: mimalloc ran at half its rate there.) xmalloc's producers pass 4,096-object
// batches, about `work` objects in all.
void add_cross_thread(std::vector<workload>& out, bool quick) {
  const long work = quick ? 10000000 : 40000000;
  for (long threads : {2L, 64L, 400L}) {
    const std::string t = std::to_string(threads);
    const long ops = threads <= 64 ? 500000L : work / (2 * threads);
    const long generations = std::max(2L, work / (threads * ops));
    out.push_back({"larson",
                   {"--threads", t, "--rounds", std::to_string(generations), "--objects",
                    std::to_string(ops)},
                   "larson-" + t});
    out.push_back({"xmalloc",
                   {"--threads", t, "--objects", std::to_string(std::max(4096L, work / threads))},
                   "xmalloc-" + t});
  }
}

std::vector<workload> workloads(bool quick) {
  // Each workload's option and its size in the thorough and the quick form.
  struct sized {
    const char* name;
    const char* option;
    long thorough, quick;
  };
  static constexpr sized kSized[] = {
      {"service", "--requests", 40000, 8000},  {"producer-consumer", "--objects", 2000000, 400000},
      {"latency", "--batches", 300, 60},       {"churn", "--threads", 4000, 800},
      {"large-churn", "--rounds", 5000, 1000}, {"large-realloc", "--rounds", 10, 3},
      {"large-live", "--rounds", 5, 2},        {"mix", "--rounds", 400000, 100000},
      {"idle", "--megabytes", 800, 400}};
  std::vector<workload> out;
  for (const sized& w : kSized)  // (the service runs its default 400 threads)
    out.push_back({w.name, {w.option, std::to_string(quick ? w.quick : w.thorough)}});
  for (workload& w : out) {  // the workloads whose threads are not the service's 400
    if (w.name == "idle")
      w.args.insert(w.args.end(), {"--threads", "4", "--idle-ms", quick ? "1000" : "3000"});
    if (w.name == "mix") w.args.insert(w.args.end(), {"--threads", "2"});
  }
  add_cross_thread(out, quick);
  return out;
}

// Runs the workload under `a`, pinned to CPU `cpu` when it is not negative; its JSON line, or
// null (after printing why) when it failed.
nlohmann::json run_one(const std::string& program, const allocator& a, const workload& w,
                       int timeout_s, int cpu) {
  child_request request;
  request.argv = {program, w.name};
  request.argv.insert(request.argv.end(), w.args.begin(), w.args.end());
  request.unset_env = {"LD_PRELOAD", "MALLOC_CONF"};
  if (!a.library.empty()) request.set_env.push_back("LD_PRELOAD=" + a.library);
  if (!a.conf.empty()) request.set_env.push_back("MALLOC_CONF=" + a.conf);
  request.cpu = cpu;
  request.timeout_s = timeout_s;
  request.on_stderr = [](std::string_view chunk) { std::cerr << chunk; };
  const child_result result = run_child(request);
  if (!result.ok()) {
    std::cerr << fmt::format("percpu bench malloc: {} under {} failed ({})\n", w.name, a.name,
                             result.describe(timeout_s));
    return nullptr;
  }
  try {
    return nlohmann::json::parse(result.out);
  } catch (const std::exception&) {
    std::cerr << "percpu bench malloc: unreadable output from " << w.name << " under " << a.name
              << "\n";
    return nullptr;
  }
}

// Spread of samples in percent of their median: 100 * (max - min) / median.
int spread(const std::vector<double>& v) {
  if (v.size() < 2) return 0;
  const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
  const double m = median(v);
  return m > 0 ? static_cast<int>(100 * (*hi - *lo) / m + 0.5) : 0;
}

// Samples of one metric, by workload, then allocator.
using samples =
    std::map<std::string, std::map<std::string, std::map<std::string, std::vector<double>>>>;

std::string with_spread(double value, const std::vector<double>& v, const char* format) {
  const int s = spread(v);
  return fmt::format(fmt::runtime(format), value) + (s > 20 ? "~" : " ");
}

void print_workload_table(const std::string& w, const std::vector<allocator>& allocators,
                          samples& m, const std::string& unit, bool latency) {
  fmt::print("{:<16} {:>14} {:>5}", "allocator", unit, "sprd");
  if (latency) fmt::print(" {:>9} {:>9}", "p50 µs", "p99 µs");
  fmt::print(" {:>10} {:>10} {:>10}\n", "peak MiB", "end MiB", "faults");
  for (const auto& a : allocators) {
    auto& s = m[w][a.name];
    if (s["throughput"].empty()) {
      fmt::print("{:<16} (failed)\n", a.name);
      continue;
    }
    fmt::print("{:<16} {:>14.0f} {:>4}%", a.name, median(s["throughput"]), spread(s["throughput"]));
    if (latency)
      fmt::print(" {:>9} {:>9}", with_spread(median(s["p50_us"]), s["p50_us"], "{:.1f}"),
                 with_spread(median(s["p99_us"]), s["p99_us"], "{:.1f}"));
    fmt::print(" {:>10.1f} {:>10.1f} {:>10.0f}\n", median(s["peak_rss_kib"]) / 1024,
               median(s["end_rss_kib"]) / 1024, median(s["minor_faults"]));
  }
}

using size_samples =
    std::map<std::string, std::map<std::string, std::map<std::size_t, std::vector<double>>>>;

// The medians and spreads behind the tables, for the report: {"workloads": {workload:
// {allocator: {metric: {"median", "spread_percent"}}}}, "pair_ns_by_size": {allocator: [{size,
// p50_ns, spread_percent}]}}.
nlohmann::json summarize(samples& m, size_samples& by_size) {
  nlohmann::json j;
  j["workloads"] = nlohmann::json::object();
  for (auto& [w, by_allocator] : m)
    for (auto& [a, metrics] : by_allocator)
      for (auto& [key, v] : metrics)
        if (!v.empty())
          j["workloads"][w][a][key] = {{"median", median(v)}, {"spread_percent", spread(v)}};
  j["pair_ns_by_size"] = nlohmann::json::object();
  for (auto& [a, quantiles] : by_size)
    for (auto& [size, v] : quantiles["p50"])
      if (!v.empty())
        j["pair_ns_by_size"][a].push_back(
            {{"size", size}, {"p50_ns", median(v)}, {"spread_percent", spread(v)}});
  return j;
}

// The allocators found, less those not named in `only` (when it names any).
std::vector<allocator> chosen_allocators(const std::string& dir,
                                         const std::vector<std::string>& only,
                                         std::vector<std::string>& missing) {
  std::vector<allocator> allocators = find_allocators(dir, missing);
  if (!only.empty())
    std::erase_if(allocators, [&](const allocator& a) {
      return std::find(only.begin(), only.end(), a.name) == only.end();
    });
  return allocators;
}

}  // namespace

int list_malloc_allocators(const bench_options& options) {
  const std::vector<std::string>& only = options.allocators;
  std::vector<std::string> missing;
  for (const allocator& a : chosen_allocators(self_dir(), only, missing))
    fmt::print("{}\t{}\t{}\n", a.name, a.library, a.conf);
  for (const std::string& m : missing) {
    const std::string name = m.substr(0, m.find(' '));
    if (only.empty() || std::find(only.begin(), only.end(), name) != only.end())
      std::cerr << "percpu bench malloc: not found: " << m << '\n';
  }
  return 0;
}

int bench_malloc(const bench_options& options) {
  if (!can_write(options.json_out)) return 1;
  const std::string dir = self_dir();
  const std::string program = dir + "/percpu-malloc-workload";
  if (!readable(program)) {
    std::cerr << "percpu bench malloc: " << program << " not found (build the whole project)\n";
    return 1;
  }
  std::vector<std::string> missing;
  const std::vector<allocator> allocators = chosen_allocators(dir, options.allocators, missing);
  const int reps = options.repetitions > 0 ? options.repetitions : (options.quick ? 3 : 5);
  const auto ws = workloads(options.quick);

  fmt::print(
      "percpu bench malloc: {} workloads x {} allocators x {} repetitions, each run its own "
      "process under LD_PRELOAD (medians; ~ marks a spread above 20%)\n",
      ws.size(), allocators.size(), reps);
  for (const auto& m : missing) fmt::print("  not installed, skipped: {}\n", m);

  samples m;
  size_samples by_size;
  nlohmann::json raw = nlohmann::json::array();
  const int total = reps * static_cast<int>(ws.size() * allocators.size());
  int done = 0;
  bool percpu_failed = false;
  std::vector<int> allowed;  // the CPUs this process may run on
  {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0)
      for (int c = 0; c < CPU_SETSIZE; ++c)
        if (CPU_ISSET(c, &set)) allowed.push_back(c);
    if (allowed.empty()) allowed.push_back(-1);
  }
  for (int rep = 0; rep < reps; ++rep) {
    for (const auto& w : ws) {
      // Rotate the order each repetition: no allocator always runs first or last.
      for (std::size_t k = 0; k < allocators.size(); ++k) {
        const allocator& a = allocators[(k + static_cast<std::size_t>(rep)) % allocators.size()];
        if (show_progress())
          std::cerr << fmt::format("\r[malloc] {}/{}: repetition {}/{}, {} under {}          ",
                                   ++done, total, rep + 1, reps, w.label, a.name);
        // The single-thread latency runs on one CPU per repetition, the same for every
        // allocator: the CPUs of a VM differ (on ours every allocator is 1.4-1.7x slower on
        // CPU 0), and a comparison must not depend on where each process happened to land.
        const int cpu =
            w.name == "latency" ? allowed[static_cast<std::size_t>(rep) % allowed.size()] : -1;
        const nlohmann::json r = run_one(program, a, w, 600, cpu);
        if (r.is_null()) {
          percpu_failed = percpu_failed || a.name == "percpu";
          continue;
        }
        raw.push_back({{"allocator", a.name}, {"repetition", rep}, {"result", r}});
        for (const char* key :
             {"throughput", "peak_rss_kib", "end_rss_kib", "p50_us", "p99_us", "minor_faults"})
          if (r.contains(key)) m[w.label][a.name][key].push_back(r[key].get<double>());
        if (r.contains("by_size"))
          for (const auto& s : r["by_size"]) {
            by_size[a.name]["p50"][s["size"].get<std::size_t>()].push_back(s["p50_ns"]);
            by_size[a.name]["p99"][s["size"].get<std::size_t>()].push_back(s["p99_ns"]);
          }
      }
    }
  }
  if (show_progress()) std::cerr << "\n";

  fmt::print(
      "\n1. The 400-thread service (after the 2015 rseq benchmarks RFC): 400 threads, as many "
      "serving at once as there are CPUs, "
      "1 ms idle between a thread's requests\n");
  print_workload_table("service", allocators, m, "requests/s", true);
  fmt::print("\n2. Producer/consumer: objects freed by another thread than their allocator's\n");
  print_workload_table("producer-consumer", allocators, m, "objects/s", false);
  fmt::print("\n4. Thread churn: short-lived threads, each freeing what the previous one left\n");
  print_workload_table("churn", allocators, m, "threads/s", false);
  fmt::print("\n5. Large blocks: malloc 1 MiB, write it, free it\n");
  print_workload_table("large-churn", allocators, m, "blocks/s", false);
  fmt::print("\n6. Large blocks: one buffer grown by realloc in 4 KiB steps to 16 MiB\n");
  print_workload_table("large-realloc", allocators, m, "steps/s", false);
  fmt::print("\n7. Large blocks: 10,000 blocks of 300 KiB held at once, then freed\n");
  print_workload_table("large-live", allocators, m, "blocks/s", false);
  for (const char* t : {"2", "64", "400"}) {
    fmt::print(
        "\n8. larson (after mimalloc-bench's larson), {} threads: each replaces random blocks "
        "of 8-999 B (new[]/delete[]), then hands them to the next generation's thread\n",
        t);
    print_workload_table(std::string("larson-") + t, allocators, m, "ops/s", false);
  }
  for (const char* t : {"2", "64", "400"}) {
    fmt::print(
        "\n9. xmalloc (after xmalloc-test -s 64), {} producers and {} consumers: batches of "
        "4,096 objects of 64 B through one stack, freed by the consumers\n",
        t, t);
    print_workload_table(std::string("xmalloc-") + t, allocators, m, "frees/s", false);
  }
  fmt::print(
      "\n10. Idle after a burst: 4 threads allocate 16-512 B objects, free them in random "
      "order, then idle without a call, 3 s (1 s in the quick form; end MiB: what stays)\n");
  print_workload_table("idle", allocators, m, "MiB/s", false);
  fmt::print(
      "\n11. Random mix, 2 threads: 1,000 live blocks each of 1 B-2 MiB (log-uniform), 10% "
      "realloc, 5% posix_memalign, each block written\n");
  print_workload_table("mix", allocators, m, "ops/s", false);

  fmt::print(
      "\n3. Single-thread malloc+free pair, ns (median of batches of 1000 pairs; p99 of "
      "batches in the JSON; each repetition pinned to one CPU for all allocators, CPUs in "
      "turn)\n{:>8}",
      "size");
  for (const auto& a : allocators) fmt::print(" {:>15}", a.name);
  fmt::print(" {:>18}\n", "percpu/fastest");
  double worst_latency_ratio = 0;
  nlohmann::json criteria = nlohmann::json::object();
  if (!allocators.empty() && !by_size[allocators.front().name]["p50"].empty()) {
    for (const auto& [size, _] : by_size[allocators.front().name]["p50"]) {
      fmt::print("{:>8}", size);
      double fastest = 1e300, ours = 0;
      for (const auto& a : allocators) {
        const auto& v = by_size[a.name]["p50"][size];
        const double med = median(v);
        fmt::print(" {:>15}", v.empty() ? "-" : with_spread(med, v, "{:.1f}"));
        if (v.empty()) continue;
        fastest = std::min(fastest, med);
        if (a.name == "percpu") ours = med;
      }
      if (ours > 0) {
        fmt::print(" {:>17.2f}x\n", ours / fastest);
        worst_latency_ratio = std::max(worst_latency_ratio, ours / fastest);
      } else {
        fmt::print("\n");
      }
    }
  }

  // The targets, from the medians above.
  auto med = [&](const std::string& w, const std::string& a, const char* key) {
    return median(m[w][a][key]);
  };
  if (!m["service"]["percpu"]["throughput"].empty()) {
    double best_rss = 1e300, best_tput = 0;
    std::string best_rss_name, best_tput_name;
    for (const auto& a : allocators) {
      if (m["service"][a.name]["throughput"].empty()) continue;
      const bool counted = a.name == "glibc" || a.name == "tcmalloc" || a.name == "mimalloc";
      if (counted && med("service", a.name, "peak_rss_kib") < best_rss) {
        best_rss = med("service", a.name, "peak_rss_kib");
        best_rss_name = a.name;
      }
      if (a.name != "percpu" && med("service", a.name, "throughput") > best_tput) {
        best_tput = med("service", a.name, "throughput");
        best_tput_name = a.name;
      }
    }
    // Three decimals: with two, a ratio just past its target printed as the target itself
    // ("1.50x (target <= 1.50x) NOT met").
    fmt::print("\nTargets: the service and the pair latency{}:\n",
               allocators.size() < 6 ? ", against the allocators of this run only" : "");
    if (!best_rss_name.empty()) {
      const double r = med("service", "percpu", "peak_rss_kib") / best_rss;
      criteria["service_peak_rss_ratio"] = {{"ratio", r}, {"against", best_rss_name}};
      fmt::print(
          "  service peak RSS, percpu / best per-thread-cache allocator ({}): {:.3f}x "
          "(target <= 0.80x) {}\n",
          best_rss_name, r, r <= 0.8 ? "met" : "NOT met");
    }
    if (!best_tput_name.empty()) {
      const double r = med("service", "percpu", "throughput") / best_tput;
      criteria["service_throughput_ratio"] = {{"ratio", r}, {"against", best_tput_name}};
      fmt::print("  service throughput, percpu / best other ({}): {:.3f}x (target >= 0.90x) {}\n",
                 best_tput_name, r, r >= 0.9 ? "met" : "NOT met");
    }
    if (worst_latency_ratio > 0) criteria["pair_latency_worst_ratio"] = worst_latency_ratio;
    if (worst_latency_ratio > 0)
      fmt::print("  pair latency, percpu / fastest, worst size: {:.3f}x (target <= 1.50x) {}\n",
                 worst_latency_ratio, worst_latency_ratio <= 1.5 ? "met" : "NOT met");
  }

  // The large-block targets: time within 2x (churn) and 3x (realloc growth) glibc's.
  if (!m["large-churn"]["percpu"]["throughput"].empty() &&
      !m["large-churn"]["glibc"]["throughput"].empty()) {
    fmt::print("\nTargets: large blocks:\n");
    const struct {
      const char* workload;
      double target;
    } large[] = {{"large-churn", 2.0}, {"large-realloc", 3.0}};
    for (const auto& l : large) {
      if (m[l.workload]["percpu"]["throughput"].empty() ||
          m[l.workload]["glibc"]["throughput"].empty())
        continue;
      const double r =
          med(l.workload, "glibc", "throughput") / med(l.workload, "percpu", "throughput");
      criteria[std::string(l.workload) + "_time_ratio_vs_glibc"] = r;
      fmt::print("  {}: percpu's time / glibc's {:.3f}x (target <= {:.1f}x) {}\n", l.workload, r,
                 l.target, r <= l.target ? "met" : "NOT met");
    }
  }

  // The cross-thread targets: throughput >= 1.0x tcmalloc's and >= 0.5x mimalloc's with
  // peak RSS <= 0.5x mimalloc's, at every thread count.
  bool cross_header = false;
  for (const char* w :
       {"larson-2", "larson-64", "larson-400", "xmalloc-2", "xmalloc-64", "xmalloc-400"}) {
    if (m[w]["percpu"]["throughput"].empty()) continue;
    if (!cross_header) {
      fmt::print("\nTargets: cross-thread workloads:\n");
      cross_header = true;
    }
    const double ours = med(w, "percpu", "throughput");
    std::string line = fmt::format("  {:<12}", w);
    if (!m[w]["tcmalloc"]["throughput"].empty()) {
      const double r = ours / med(w, "tcmalloc", "throughput");
      criteria[std::string(w) + "_vs_tcmalloc"] = r;
      line += fmt::format(" percpu/tcmalloc {:.2f}x (>= 1.0x {})", r, r >= 1.0 ? "met" : "NOT met");
    } else {
      line += " percpu/tcmalloc not measured (tcmalloc did not run)";
    }
    if (!m[w]["mimalloc"]["throughput"].empty()) {
      const double r = ours / med(w, "mimalloc", "throughput");
      const double rss = med(w, "percpu", "peak_rss_kib") / med(w, "mimalloc", "peak_rss_kib");
      criteria[std::string(w) + "_vs_mimalloc"] = {{"throughput", r}, {"peak_rss", rss}};
      line += fmt::format("; /mimalloc {:.2f}x (>= 0.5x {}), RSS {:.2f}x (<= 0.5x {})", r,
                          r >= 0.5 ? "met" : "NOT met", rss, rss <= 0.5 ? "met" : "NOT met");
    } else {
      line += "; /mimalloc not measured (mimalloc did not run)";
    }
    fmt::print("{}\n", line);
  }

  if (!options.json_out.empty()) {
    const nlohmann::json out{{"suite", "malloc"},
                             {"summary", summarize(m, by_size)},
                             {"criteria", criteria},
                             {"runs", raw}};
    if (!write_text_file(options.json_out, out.dump(2) + "\n")) return 1;
  }
  if (percpu_failed) std::cerr << "percpu bench malloc: a run under percpu malloc failed\n";
  return percpu_failed ? 1 : 0;
}

}  // namespace percpu::cli
