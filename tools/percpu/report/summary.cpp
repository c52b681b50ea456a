// The report's words: the summary table of the published claims against our figures, and the
// sentence under each suite's heading. Every figure comes from the suites' JSON of this run.
#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>

#include "common/ab_stats.h"
#include "report/report.h"

namespace percpu::cli {
namespace {

// Median ns of benchmark `name` at `threads` in a Google Benchmark suite's JSON.
std::optional<double> median_ns(const nlohmann::json& j, const std::string& name, int threads = 1) {
  if (!j.contains("results")) return std::nullopt;
  for (const auto& r : j["results"])
    if (r.value("name", "") == name && r.value("threads", 1) == threads)
      return r["median_ns"].get<double>();
  return std::nullopt;
}

// The largest thread count a suite ran.
int max_threads(const nlohmann::json& j) {
  int most = 1;
  if (j.contains("results"))
    for (const auto& r : j["results"]) most = std::max(most, r.value("threads", 1));
  return most;
}

std::string ns(double v) {
  return v < 10 ? fmt::format("{:.2f} ns", v) : fmt::format("{:.0f} ns", v);
}

const nlohmann::json* malloc_metric(const nlohmann::json& j, const std::string& workload,
                                    const std::string& allocator, const std::string& key) {
  const auto& w = j["summary"]["workloads"];
  if (!w.contains(workload) || !w[workload].contains(allocator) ||
      !w[workload][allocator].contains(key))
    return nullptr;
  return &w[workload][allocator][key]["median"];
}

// Why a suite's figure is missing: it was not chosen for this report, it skipped (a tool it
// needs is missing), or it failed.
std::string missing(const std::vector<suite_run>& runs, const std::string& name) {
  for (const auto& r : runs) {
    if (r.name != name) continue;
    if (r.json.is_object() && r.json.contains("skipped"))
      return "skipped: " + r.json["skipped"].get<std::string>();
    return "the " + name + " suite failed";
  }
  return "not in this report (--suites)";
}

// Whether benchmark `name` kept its time from 2 threads up (per-CPU slots: threads beyond the
// CPUs should add no contention), said from the data: within 1.5x of its best, or not.
std::string flatness(const nlohmann::json& j, const std::string& name) {
  double best = 0, worst = 0;
  int worst_threads = 0;
  bool noisy = false;
  for (const auto& r : j["results"]) {
    if (r.value("name", "") != name || r.value("threads", 1) < 2) continue;
    const double v = r["median_ns"].get<double>();
    if (best == 0 || v < best) best = v;
    if (v > worst) worst = v, worst_threads = r.value("threads", 1);
    noisy = noisy || r.value("noisy", false);
  }
  if (best == 0) return "";
  if (worst <= 1.5 * best)
    return fmt::format(
        "From 2 threads on its time stays within {:.2f}x of its best: threads beyond the CPUs "
        "add no contention to a per-CPU slot.",
        worst / best);
  return fmt::format(
      "From 2 threads on its time varies up to {:.1f}x (at {} threads){}: a per-CPU slot has "
      "no contention to add, so read this as the machine's doing and rerun.",
      worst / best, worst_threads, noisy ? ", where the repetitions varied by more than 20%" : "");
}

struct row {
  std::string claim, published, here, ratio;
};

// The ops suite's sentence: at 1 thread, the range of percpu's time over the hand-written
// sequence's and over librseq's (the median of each primitive's round ratios), and the rows at
// the ends. Results are named "primitive/mode/who".
std::string ops_sentence(const nlohmann::json& j) {
  std::map<std::string, const nlohmann::json*> at1;
  for (const auto& r : j["results"])
    if (r.value("threads", 1) == 1) at1[r["name"].get<std::string>()] = &r;
  auto range = [&](const std::string& who) {
    double lo = 0, hi = 0;
    std::string lo_row, hi_row;
    for (const auto& [name, ours] : at1) {
      const auto slash = name.rfind('/');
      if (name.substr(slash + 1) != "percpu") continue;
      const auto other = at1.find(name.substr(0, slash + 1) + who);
      if (other == at1.end()) continue;
      const auto& a = (*ours)["samples_ns"];
      const auto& b = (*other->second)["samples_ns"];
      if (a.size() != b.size() || a.empty()) continue;
      std::vector<double> q;
      for (std::size_t k = 0; k < a.size(); ++k)
        q.push_back(a[k].get<double>() / b[k].get<double>());
      const double m = median(std::move(q));
      const std::string row = name.substr(0, slash);
      if (lo_row.empty() || m < lo) lo = m, lo_row = row;
      if (hi_row.empty() || m > hi) hi = m, hi_row = row;
    }
    return hi_row.empty()
               ? std::string()
               : fmt::format(
                     "from {:.2f}x ({}) to {:.2f}x ({}) the time of {}", lo, lo_row, hi, hi_row,
                     who == "minimal" ? "the hand-written sequence" : "librseq's operation");
  };
  const std::string minimal = range("minimal"), lib = range("librseq");
  if (minimal.empty()) return "";
  std::string text = "At 1 thread each percpu primitive takes " + minimal;
  if (!lib.empty()) {
    text += ", and " + lib + ".";
  } else {
    text += ". librseq: " + j.value("librseq_missing", std::string("not measured")) + ".";
  }
  text +=
      " CPU time per operation, the median of the rounds' ratios (each round runs "
      "every contender once, back to back).";
  if (j.contains("pool_bytes_per_object")) {
    const nlohmann::json& b = j["pool_bytes_per_object"];
    if (b.contains("percpu")) {
      text +=
          fmt::format(" An 8-byte pool object holds {:.1f} resident bytes with every slot written",
                      b["percpu"].get<double>());
      text += b.contains("librseq")
                  ? fmt::format(" (librseq's mempool: {:.1f}).", b["librseq"].get<double>())
                  : ".";
    }
  }
  return text;
}

// "3316x", "6.9x", "0.7x": whole numbers from 10 up, one decimal below.
std::string times(double r) {
  return r >= 10 ? fmt::format("{:.0f}x", r) : fmt::format("{:.1f}x", r);
}

// Who registered the area in the getcpu suite's process ("glibc", "percpu"), and its mode.
std::string getcpu_owner(const nlohmann::json& j) {
  return j.value("owner", std::string("?"));
}
bool getcpu_fallback(const nlohmann::json& j) {
  return j.value("mode", "") == "fallback";
}

void getcpu_rows(const std::vector<suite_run>& runs, std::vector<row>& rows) {
  const suite_run* g = find_run(runs, "getcpu");
  const auto ours = g ? median_ns(g->json, "percpu::current_cpu()") : std::nullopt;
  const auto sys = g ? median_ns(g->json, "getcpu system call") : std::nullopt;
  const auto vdso = g ? median_ns(g->json, "vDSO getcpu") : std::nullopt;
  const auto glibc = g ? median_ns(g->json, "glibc sched_getcpu()") : std::nullopt;
  if (ours && sys)
    rows.push_back({"getcpu cache vs the getcpu system call", "44x (ARM)",
                    fmt::format("{} vs {}{}", ns(*ours), ns(*sys),
                                getcpu_fallback(g->json) ? " (fallback mode: no rseq here)" : ""),
                    times(*sys / *ours)});
  if (ours && vdso)
    rows.push_back({"getcpu cache vs the vDSO (x86-64)", "14x",
                    fmt::format("{} vs {}", ns(*ours), ns(*vdso)), times(*vdso / *ours)});
  if (glibc && vdso && getcpu_owner(g->json) == "glibc")
    rows.push_back({"glibc's sched_getcpu() with rseq, vs its vDSO path (x86-64)",
                    "10 ns -> 2 ns (5x)", fmt::format("{} -> {}", ns(*vdso), ns(*glibc)),
                    times(*vdso / *glibc)});
  else if (glibc && vdso)
    rows.push_back({"glibc's sched_getcpu() with rseq, vs its vDSO path (x86-64)",
                    "10 ns -> 2 ns (5x)",
                    fmt::format("not measurable: glibc registered no rseq area in this run "
                                "(area owner: {}), so sched_getcpu() took its vDSO path",
                                getcpu_owner(g->json)),
                    "-"});
  rows.push_back({"the same on aarch64 (no vDSO getcpu)", "130 ns -> 1 ns",
                  "not measured: this report runs on x86-64", "-"});
  if (!ours) rows.push_back({"getcpu cache", "44x / 14x", missing(runs, "getcpu"), "-"});
}

void counter_rows(const std::vector<suite_run>& runs, std::vector<row>& rows) {
  const suite_run* c = find_run(runs, "counter");
  const auto ours = c ? median_ns(c->json, "percpu counter (cpu_id)") : std::nullopt;
  const auto atomic = c ? median_ns(c->json, "sched_getcpu + atomic") : std::nullopt;
  if (ours && atomic)
    rows.push_back({"per-CPU counter: rseq vs getcpu + atomic (1 thread)", "2 ns vs 15 ns (7.5x)",
                    fmt::format("{} vs {}", ns(*ours), ns(*atomic)),
                    fmt::format("{:.1f}x", *atomic / *ours)});
  else
    rows.push_back({"per-CPU counter: rseq vs getcpu + atomic", "2 ns vs 15 ns (7.5x)",
                    missing(runs, "counter"), "-"});
}

void malloc_rows(const std::vector<suite_run>& runs, std::vector<row>& rows) {
  const suite_run* m = find_run(runs, "malloc");
  const char* claim = "malloc with per-CPU caches, ~400 threads on 16 cores: RSS at equal latency";
  if (!m || !m->json.contains("criteria") ||
      !m->json["criteria"].contains("service_peak_rss_ratio")) {
    rows.push_back({claim, "31 GB -> 25 GB (0.81x)", missing(runs, "malloc"), "-"});
    return;
  }
  const auto& rss = m->json["criteria"]["service_peak_rss_ratio"];
  const std::string against = rss["against"];
  const auto* ours_mib = malloc_metric(m->json, "service", "percpu", "peak_rss_kib");
  const auto* theirs_mib = malloc_metric(m->json, "service", against, "peak_rss_kib");
  const auto* ours_p50 = malloc_metric(m->json, "service", "percpu", "p50_us");
  const auto* theirs_p50 = malloc_metric(m->json, "service", against, "p50_us");
  std::string here = "peak RSS";
  if (ours_mib && theirs_mib)
    here = fmt::format("{:.0f} MiB ({}) -> {:.0f} MiB (percpu), 400 threads on this machine",
                       theirs_mib->get<double>() / 1024, against, ours_mib->get<double>() / 1024);
  if (ours_p50 && theirs_p50)
    here += fmt::format("; request p50 {:.0f} µs -> {:.0f} µs", theirs_p50->get<double>(),
                        ours_p50->get<double>());
  rows.push_back(
      {claim, "31 GB -> 25 GB (0.81x)", here, fmt::format("{:.2f}x", rss["ratio"].get<double>())});
}

void context_switch_rows(const std::vector<suite_run>& runs, std::vector<row>& rows) {
  const suite_run* cs = find_run(runs, "context-switch");
  const char* claim = "registering rseq costs context switches nothing measurable (hackbench)";
  if (!cs || !cs->json.contains("benchmarks")) {
    rows.push_back(
        {claim, "26.52 s -> 26.63 s (sd 0.4 s): +0.4%", missing(runs, "context-switch"), "-"});
    return;
  }
  for (const auto& b : cs->json["benchmarks"]) {
    if (b["benchmark"] != "hackbench, processes") continue;
    const auto& off = b["configs"]["off"];
    const auto& on = b["configs"]["glibc"];
    const auto& d = b["comparisons"][0];  // glibc against off
    rows.push_back(
        {claim, "26.52 s -> 26.63 s (sd 0.4 s): +0.4%",
         fmt::format("{:.3f} s -> {:.3f} s (sd {:.3f} s): {:+.1f}% ±{:.1f}%, {}",
                     off["mean_s"].get<double>(), on["mean_s"].get<double>(),
                     on["sd_s"].get<double>(), d["percent"].get<double>(),
                     d["noise_percent"].get<double>(), d["verdict"].get<std::string>()),
         fmt::format("{:.3f}x", on["mean_s"].get<double>() / off["mean_s"].get<double>())});
    return;
  }
  rows.push_back({claim, "+0.4%",
                  "hackbench did not run (not installed); perf bench sched: " +
                      cs->json.value("verdict", std::string("no verdict")),
                  "-"});
}

void size_rows(const std::vector<suite_run>& runs, std::vector<row>& rows) {
  const suite_run* cs = find_run(runs, "context-switch");
  const char* claim = "memory per task matters: the cost of registration in size";
  if (!cs || !cs->json.contains("size") || !cs->json["size"].contains("libraries")) {
    rows.push_back({claim, "(no figure)", missing(runs, "context-switch"), "-"});
    return;
  }
  const auto& size = cs->json["size"];
  std::string here =
      size["rseq_area_bytes"].get<int>() > 0
          ? fmt::format("a {}-byte rseq area per thread", size["rseq_area_bytes"].get<int>())
          : std::string("no rseq area here (fallback mode)");
  for (const auto& [name, lib] : size["libraries"].items())
    if (name != "libpercpu_register" && lib.contains("tls_bytes_per_thread"))
      here += fmt::format("; {}.so: {} TLS bytes per thread, {:.0f} KiB of code", name,
                          lib["tls_bytes_per_thread"].get<std::uint64_t>(),
                          lib["code_bytes"].get<double>() / 1024);
  rows.push_back({claim, "(no figure)", here, "-"});
}

void pool_rows(const std::vector<suite_run>& runs, std::vector<row>& rows) {
  const suite_run* p = find_run(runs, "pool");
  const char* claim = "size per-CPU data by what exists, not by NR_CPUS";
  if (!p || !p->json.contains("resident_bytes_per_counter") ||
      p->json["resident_bytes_per_counter"].empty()) {
    rows.push_back({claim, "(no figure)", missing(runs, "pool"), "-"});
    return;
  }
  const auto& last = p->json["resident_bytes_per_counter"].back();
  const double ours = last["pool_mm_cid_256_slots"].get<double>();
  const double naive = last["padded_cpu_setsize"].get<double>();
  rows.push_back(
      {claim, "(no figure)",
       fmt::format("{:.0f} resident bytes per counter ({} threads, pool laid out for 256 "
                   "CPUs) vs {:.0f} padded x CPU_SETSIZE",
                   ours, last["threads"].get<int>(), naive),
       fmt::format("{:.0f}x less", naive / ours)});
}

// Which published source a claim of the summary table comes from (the list under the table).
int source_of(const std::string& claim) {
  auto starts = [&](const char* prefix) { return claim.rfind(prefix, 0) == 0; };
  if (starts("glibc's") || starts("the same on aarch64")) return 2;
  if (starts("per-CPU counter")) return 3;
  if (starts("malloc")) return 4;
  if (starts("memory per task") || starts("size per-CPU data")) return 5;
  return 1;  // the getcpu cache and its cost to context switches
}

}  // namespace

const suite_run* find_run(const std::vector<suite_run>& runs, const std::string& name) {
  for (const auto& r : runs)
    if (r.name == name && !r.json.is_null()) return &r;
  return nullptr;
}

std::string summary_table(const std::vector<suite_run>& runs) {
  std::vector<row> rows;
  getcpu_rows(runs, rows);
  counter_rows(runs, rows);
  malloc_rows(runs, rows);
  context_switch_rows(runs, rows);
  size_rows(runs, rows);
  pool_rows(runs, rows);
  std::string md = "| claim | published figure [source] | measured here | ratio here |\n";
  md += "|---|---|---|---|\n";
  for (const auto& r : rows)
    md += fmt::format("| {} | {} [{}] | {} | {} |\n", r.claim, r.published, source_of(r.claim),
                      r.here, r.ratio);
  md +=
      "\nSources: "
      "[1] the getcpu_cache system call patch set for Linux 4.6 (2016); "
      "[2] glibc's \"Linux: Use rseq to accelerate getcpu\" patch (v8); "
      "[3] the kernel's rseq merge (Linux 4.18); "
      "[4] the 2015 \"restartable sequences benchmarks\" RFC (per-CPU malloc free lists in a "
      "large service); "
      "[5] the 2011 LKML thread on cpumask_of_cpu/cpumask_var_t sizing.\n";
  return md;
}

std::string suite_sentence(const suite_run& run) {
  const nlohmann::json& j = run.json;
  if (run.name == "getcpu") {
    const auto ours = median_ns(j, "percpu::current_cpu()");
    const auto glibc = median_ns(j, "glibc sched_getcpu()");
    const auto vdso = median_ns(j, "vDSO getcpu");
    const auto sys = median_ns(j, "getcpu system call");
    // "5.0x less than X" when ours is faster, "1.6x the time of X" when it is not.
    auto against = [&](double theirs, const char* what) {
      return theirs >= *ours ? fmt::format("{} less than {}", times(theirs / *ours), what)
                             : fmt::format("{} the time of {}", times(*ours / theirs), what);
    };
    if (ours && glibc && vdso && sys)
      return fmt::format(
          "Asking for the current CPU costs {} with `percpu::current_cpu()` ({}): {}, {} and {}.",
          ns(*ours),
          getcpu_fallback(j) ? "fallback mode: no rseq area, so sched_getcpu() underneath"
                             : "one load from the rseq area",
          against(*glibc, "glibc's `sched_getcpu()`"), against(*vdso, "the vDSO"),
          against(*sys, "the system call"));
  } else if (run.name == "ops") {
    if (std::string text = ops_sentence(j); !text.empty()) return text;
  } else if (run.name == "counter" || run.name == "list") {
    const bool counter = run.name == "counter";
    const std::string ours = counter ? "percpu counter (cpu_id)" : "percpu freelist (cpu_id)";
    const std::string other = counter ? "sched_getcpu + atomic" : "Treiber stack (tagged CAS)";
    const std::string shared = counter ? "one shared atomic" : "list + mutex";
    const int most = max_threads(j);
    const auto o1 = median_ns(j, ours), a1 = median_ns(j, other);
    const auto on = median_ns(j, ours, most), an = median_ns(j, other, most),
               sn = median_ns(j, shared, most);
    if (o1 && a1 && on && an && sn)
      return fmt::format(
          "Wall-clock time per {} of the whole process: the percpu {} takes {} at 1 thread "
          "against {} for {} ({:.1f}x); at {} threads {} against {} ({:.1f}x) and {} for {}. {}",
          counter ? "increment" : "push+pop pair", counter ? "counter" : "free list", ns(*o1),
          ns(*a1), other, *a1 / *o1, most, ns(*on), ns(*an), *an / *on, ns(*sn), shared,
          flatness(j, ours));
  } else if (run.name == "readmostly") {
    const int cpus = j.value("cpus", 0);
    const auto r1 = median_ns(j, "read: percpu_rwsem (cpu_id)"),
               c1 = median_ns(j, "read: percpu counter add");
    const auto rn = median_ns(j, "read: percpu_rwsem (cpu_id)", cpus),
               pn = median_ns(j, "read: pthread_rwlock_t", cpus),
               un = median_ns(j, "read: liburcu (urcu-memb)", cpus);
    const auto gn = median_ns(j, "ref: percpu_ref (cpu_id)", cpus),
               an = median_ns(j, "ref: one std::atomic", cpus);
    const auto mix = j.value("writer_latency", nlohmann::json::object())
                         .value("mix: percpu_rwsem (cpu_id)", nlohmann::json::object());
    const auto mn = median_ns(j, "mix: percpu_rwsem (cpu_id)", cpus),
               mp = median_ns(j, "mix: pthread_rwlock_t", cpus);
    if (r1 && c1 && rn && pn && gn && an)
      return fmt::format(
          "A percpu_rwsem read lock + unlock takes {} at 1 thread ({:.1f}x one percpu counter "
          "add); at {} threads (the CPUs) {} per operation of the process against {} for "
          "pthread_rwlock_t ({:.1f}x){}. A percpu_ref get + put takes {} against {} for one "
          "std::atomic ({:.1f}x). In the 99%-read mix{} a percpu_rwsem writer waits {} at the "
          "median and {} at the 99th percentile; a writer that finds the per-CPU path open "
          "fences every CPU, {} here with readers running.",
          ns(*r1), *r1 / *c1, cpus, ns(*rn), ns(*pn), *pn / *rn,
          un ? fmt::format(" and {} for liburcu's read side", ns(*un)) : std::string(), ns(*gn),
          ns(*an), *an / *gn,
          mn && mp ? fmt::format(" (at {} threads {} per operation against {} for "
                                 "pthread_rwlock_t, {:.2f}x its speed)",
                                 cpus, ns(*mn), ns(*mp), *mp / *mn)
                   : std::string(),
          ns(mix.value("median_ns", 0.0)), ns(mix.value("p99_ns", 0.0)),
          ns(j.value("fence_ns", nlohmann::json::object()).value("readers_running", 0.0)));
  } else if (run.name == "metrics") {
    const int cpus = j.value("cpus", 0);
    const auto a1 = median_ns(j, "add: percpu_counter (cpu_id)"),
               e1 = median_ns(j, "add: percpu counter (exact read)"),
               an = median_ns(j, "add: percpu_counter (cpu_id)", cpus),
               sn = median_ns(j, "add: one std::atomic", cpus);
    const auto r1 = median_ns(j, "read: percpu_counter read()"),
               l1 = median_ns(j, "read: std::atomic load"),
               s1 = median_ns(j, "read: percpu_counter sum()");
    const auto bn = median_ns(j, "limited: percpu_counter (cpu_id)", cpus),
               cn = median_ns(j, "limited: std::atomic CAS loop", cpus);
    const auto h1 = median_ns(j, "record: percpu histogram (cpu_id)"),
               o1 = median_ns(j, "record: prometheus-cpp Histogram::Observe"),
               hn = median_ns(j, "record: percpu histogram (cpu_id)", cpus),
               on = median_ns(j, "record: prometheus-cpp Histogram::Observe", cpus),
               mn = median_ns(j, "record: array under a std::mutex", cpus);
    std::string histograms;
    if (h1 && o1 && hn && on && mn)
      histograms = fmt::format(
          " A histogram record takes {} at 1 thread against {} for prometheus-cpp's Observe "
          "({:.1f}x), and {} at {} threads against {} ({:.1f}x) and {} for an array under a "
          "mutex ({:.1f}x).",
          ns(*h1), ns(*o1), *o1 / *h1, ns(*hn), cpus, ns(*on), *on / *hn, ns(*mn), *mn / *hn);
    if (a1 && e1 && an && sn && r1 && l1 && s1 && bn && cn)
      return histograms.insert(
          0,
          fmt::format(
              "A percpu_counter add takes {} at 1 thread ({:.2f}x one percpu::counter add, whose "
              "read sums every slot); at {} threads (the CPUs) {} per add of the process against "
              "{} "
              "for one std::atomic ({:.1f}x). Its read() takes {} ({:.2f}x a relaxed atomic load), "
              "its exact sum() {}. A budget's limited_add + sub far below the limit takes {} at {} "
              "threads against {} for a compare-and-swap loop on one atomic ({:.1f}x).",
              ns(*a1), *a1 / *e1, cpus, ns(*an), ns(*sn), *sn / *an, ns(*r1), *r1 / *l1, ns(*s1),
              ns(*bn), cpus, ns(*cn), *cn / *bn));
  } else if (run.name == "pool") {
    if (j.contains("resident_bytes_per_counter") && !j["resident_bytes_per_counter"].empty()) {
      const auto& last = j["resident_bytes_per_counter"].back();
      std::string text = fmt::format(
          "Resident memory per 8-byte per-CPU counter: the pool keeps {:.0f} bytes at {} "
          "threads (its slots follow the indices in use), where cache-line-padded arrays take "
          "{:.0f} bytes sized by the possible CPUs and {:.0f} by CPU_SETSIZE.",
          last["pool_cpu_id"].get<double>(), last["threads"].get<int>(),
          last["padded_possible"].get<double>(), last["padded_cpu_setsize"].get<double>());
      // Speed as the data show it, won or lost: allocate+free against the mutex free list.
      const auto ours1 = median_ns(j, "percpu::pool (cpu_id)");
      const auto theirs1 = median_ns(j, "mutex free list, not zeroed");
      const int most = max_threads(j);
      const auto oursn = median_ns(j, "percpu::pool (cpu_id)", most);
      const auto theirsn = median_ns(j, "mutex free list, not zeroed", most);
      auto compare = [](double ours, double theirs) {
        return ours <= theirs ? fmt::format("{} faster than", times(theirs / ours))
                              : fmt::format("{} slower than", times(ours / theirs));
      };
      if (ours1 && theirs1 && oursn && theirsn)
        text += fmt::format(
            " Allocate+free of a small object takes {} at 1 thread, {} the mutex-protected free "
            "list ({}), and {} at {} threads, {} it ({}).",
            ns(*ours1), compare(*ours1, *theirs1), ns(*theirs1), ns(*oursn), most,
            compare(*oursn, *theirsn), ns(*theirsn));
      return text;
    }
  } else if (run.name == "malloc") {
    if (j.contains("criteria") && j["criteria"].contains("service_throughput_ratio")) {
      const auto& c = j["criteria"];
      return fmt::format(
          "In the 400-thread service (as many serving at once as there are CPUs) percpu "
          "malloc peaks at {:.2f}x the RSS of the leanest per-thread-cache allocator ({}) and "
          "serves {:.2f}x the requests per second of the fastest other ({}); its single-thread "
          "malloc+free pair takes at worst {:.2f}x the fastest allocator's time.",
          c["service_peak_rss_ratio"]["ratio"].get<double>(),
          c["service_peak_rss_ratio"]["against"].get<std::string>(),
          c["service_throughput_ratio"]["ratio"].get<double>(),
          c["service_throughput_ratio"]["against"].get<std::string>(),
          c.value("pair_latency_worst_ratio", 0.0));
    }
  } else if (run.name == "slice") {
    if (!j.value("measured", false))
      return "Not measured: time-slice extension " + j.value("reason", std::string("unknown")) +
             ".";
    std::string text =
        fmt::format("{} threads on {} CPUs, one short critical section:", j.value("threads", 0),
                    j.value("cpus", 0));
    const auto& rows = j["rows"];
    for (std::size_t i = 0; i + 1 < rows.size(); i += 2) {
      auto med = [](const nlohmann::json& v) { return median(v.get<std::vector<double>>()); };
      const double off = med(rows[i]["acquisitions_per_s"]),
                   on = med(rows[i + 1]["acquisitions_per_s"]);
      text += fmt::format(
          " {} with the extension {:.2f}x the throughput, p99.9 hold {:.2f} µs "
          "against {:.2f}{}",
          rows[i]["lock"].get<std::string>(), off > 0 ? on / off : 0.0,
          med(rows[i + 1]["p999_hold_us"]), med(rows[i]["p999_hold_us"]),
          i + 2 < rows.size() ? ";" : ".");
    }
    return text;
  } else if (run.name == "context-switch") {
    if (j.contains("skipped")) return "Skipped: " + j["skipped"].get<std::string>() + ".";
    if (j.contains("verdict")) {
      std::string text = fmt::format(
          "Scheduler benchmarks with rseq registration off, glibc's, glibc's with percpu's "
          "libraries loaded, and percpu's own ({} alternating runs each): {}.",
          j.value("repetitions", 0), j["verdict"].get<std::string>());
      // percpu against off also differs in the libraries loaded: say so where that shows.
      std::vector<std::string> loading;
      for (const auto& b : j["benchmarks"])
        for (const auto& c : b["comparisons"])
          if (!c["registration_only"].get<bool>() && c["verdict"] != "within the noise" &&
              c["verdict"] != "too few runs to tell")
            loading.push_back(fmt::format("{} ({:+.1f}%)", b["benchmark"].get<std::string>(),
                                          c["percent"].get<double>()));
      if (!loading.empty()) {
        text += " percpu against off stands out in ";
        for (std::size_t i = 0; i < loading.size(); ++i) text += (i ? ", " : "") + loading[i];
        text +=
            ", where glibc+lib shows the same: the cost of loading libpercpu.so and libstdc++ "
            "into a C program (more mappings to fork and tear down), not of the registration.";
      }
      return text;
    }
  }
  return "This suite did not produce the figures its sentence needs (see its output below).";
}

}  // namespace percpu::cli
