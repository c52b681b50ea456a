// The report's pictures, drawn by gnuplot (Debian's gnuplot-nox, pngcairo terminal): the data
// go to data/*.dat and the script to plots.gp in the report folder, so a reader can change and
// redraw them (`cd <report> && gnuplot plots.gp`).
#include <fmt/core.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "common/child_process.h"
#include "report/report.h"

namespace percpu::cli {
namespace {

std::string quoted(const std::string& s) {
  std::string q = "\"";
  for (char c : s) q += c == '"' ? '\'' : c;
  return q + "\"";
}

const char* kTerminal = "reset\nset terminal pngcairo noenhanced size 900,540 font 'sans,10'\n";

// Lines of ns per operation against threads, one per contender: counter, list, and the parts of
// readmostly (the results whose names start with `prefix`, drawn as `out`.png).
std::string scaling_plot(const suite_run& run, const std::string& title, std::ofstream& data,
                         const std::string& out, const std::string& prefix = "") {
  std::vector<std::string> names;
  std::set<int> threads;
  std::map<std::string, std::map<int, double>> ns;
  for (const auto& r : run.json["results"]) {
    const std::string name = r["name"];
    if (name.rfind(prefix, 0) != 0) continue;
    if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
    threads.insert(r["threads"].get<int>());
    ns[name][r["threads"].get<int>()] = r["median_ns"].get<double>();
  }
  // Each line as the suite's table names its column (older results have no labels).
  const nlohmann::json labels = run.json.value("labels", nlohmann::json::object());
  data << "threads";
  for (const auto& n : names) data << " " << quoted(labels.value(n, n));
  data << "\n";
  for (int t : threads) {
    data << t;
    for (const auto& n : names)
      data << " " << (ns[n].count(t) ? fmt::format("{:.4f}", ns[n][t]) : std::string("NaN"));
    data << "\n";
  }
  const std::string file = "data/" + out + ".dat";
  // A tic at each thread count run (a log axis from 1 to 8 would show only "1").
  std::string tics;
  for (int t : threads) tics += (tics.empty() ? "" : ", ") + std::to_string(t);
  return fmt::format(
      "{}set output '{}.png'\nset title {}\nset xlabel 'threads'\nset ylabel 'ns per operation "
      "of the whole process (median, log scale)'\nset logscale xy\nset autoscale xfix\nset offsets "
      "graph 0.03, graph 0.03, 0, 0\nset xtics ({})\n"
      "set key outside right\nset grid\nplot for [i=2:{}] '{}' using 1:i with linespoints lw 2 "
      "title columnheader(i)\n"
      "unset logscale\nset xtics autofreq\n",
      kTerminal, out, quoted(title), tics, names.size() + 1, file);
}

std::string getcpu_plot(const suite_run& run, std::ofstream& data) {
  for (const auto& r : run.json["results"])
    data << quoted(r["name"].get<std::string>()) << " " << r["median_ns"].get<double>() << "\n";
  return fmt::format(
      "{}set output 'getcpu.png'\nset title 'Which CPU am I on? ns per call (median, log "
      "scale)'\nset style data histograms\nset style fill solid 0.8\nset boxwidth 0.7\nset "
      "logscale y\nset ylabel 'ns per call'\nset xtics rotate by -35 scale 0\nset grid ytics\n"
      "set key off\nplot 'data/getcpu.dat' using 2:xtic(1) lc rgb '#3060a0', '' using "
      "0:2:(sprintf('%.2f', $2)) with labels offset 0,0.7 notitle\nunset logscale\n"
      "set xtics norotate\n",
      kTerminal);
}

std::string pool_plot(const suite_run& run, std::ofstream& data) {
  data << "threads \"pool cpu_id\" \"pool mm_cid\" \"pool mm_cid, 256 slots\" \"padded x "
          "possible\" \"padded x CPU_SETSIZE\"\n";
  for (const auto& r : run.json["resident_bytes_per_counter"])
    data << r["threads"].get<int>() << " " << r["pool_cpu_id"].get<double>() << " "
         << r["pool_mm_cid"].get<double>() << " " << r["pool_mm_cid_256_slots"].get<double>() << " "
         << r["padded_possible"].get<double>() << " " << r["padded_cpu_setsize"].get<double>()
         << "\n";
  return fmt::format(
      "{}set output 'pool.png'\nset title 'Resident bytes per 8-byte per-CPU counter (log "
      "scale)'\nset style data histograms\nset style histogram clustered gap 1\nset style fill "
      "solid 0.8\nset logscale y\nset ylabel 'bytes'\nset xlabel 'threads'\nset key outside "
      "right\nset grid ytics\nplot for [i=2:6] 'data/pool.dat' using i:xtic(1) title "
      "columnheader(i)\nunset logscale\n",
      kTerminal);
}

std::string malloc_plots(const suite_run& run, std::ofstream& rss, std::ofstream& latency,
                         std::vector<plot>& plots) {
  std::string script;
  const auto& s = run.json["summary"];
  if (s["workloads"].contains("service")) {
    rss << "allocator \"peak RSS\" \"RSS at the end\"\n";
    for (const auto& [a, m] : s["workloads"]["service"].items())
      if (m.contains("peak_rss_kib"))
        rss << quoted(a) << " " << m["peak_rss_kib"]["median"].get<double>() / 1024 << " "
            << m["end_rss_kib"]["median"].get<double>() / 1024 << "\n";
    script += fmt::format(
        "{}set output 'malloc_rss.png'\nset title \"The 400-thread service: RSS by "
        "allocator, MiB (median)\"\nset style data histograms\nset style histogram clustered "
        "gap 1\nset style fill solid 0.8\nset ylabel 'MiB'\nset xlabel ''\nset key top left\nset "
        "grid ytics\nplot 'data/malloc_rss.dat' using 2:xtic(1) title columnheader(2), '' using "
        "3 title columnheader(3)\n",
        kTerminal);
    plots.push_back({"malloc", "malloc_rss.png", "service RSS by allocator"});
  }
  if (!s["pair_ns_by_size"].empty()) {
    std::vector<std::string> names;
    std::map<std::size_t, std::map<std::string, double>> by_size;
    for (const auto& [a, rows] : s["pair_ns_by_size"].items()) {
      names.push_back(a);
      for (const auto& r : rows)
        by_size[r["size"].get<std::size_t>()][a] = r["p50_ns"].get<double>();
    }
    latency << "size";
    for (const auto& n : names) latency << " " << quoted(n);
    latency << "\n";
    for (auto& [size, by_allocator] : by_size) {
      latency << size;
      for (const auto& n : names)
        latency << " "
                << (by_allocator.count(n) ? fmt::format("{:.3f}", by_allocator[n])
                                          : std::string("NaN"));
      latency << "\n";
    }
    script += fmt::format(
        "{}set output 'malloc_latency.png'\nset title 'Single-thread malloc+free pair by size, "
        "ns (median)'\nset logscale xy 2\nset xlabel 'bytes'\nset ylabel 'ns per pair (log "
        "scale)'\nset key outside right\nset grid\nplot for [i=2:{}] 'data/malloc_latency.dat' "
        "using 1:i with linespoints lw 2 title columnheader(i)\nunset logscale\n",
        kTerminal, names.size() + 1);
    plots.push_back({"malloc", "malloc_latency.png", "malloc+free latency by size"});
  }
  return script;
}

// Each configuration's mean run time relative to "off", with its standard deviation as the
// error bar, per benchmark. (No header line: gnuplot would count it as a histogram slot.)
std::string context_switch_plot(const suite_run& run, std::ofstream& data) {
  std::vector<std::string> configs;
  for (const auto& [name, _] : run.json["benchmarks"][0]["configs"].items())
    configs.push_back(name);
  std::sort(configs.begin(), configs.end(), [](const std::string& a, const std::string& b) {
    auto rank = [](const std::string& c) {
      return c == "off" ? 0 : c == "glibc" ? 1 : c == "percpu" ? 3 : 2;
    };
    return rank(a) < rank(b);
  });
  for (const auto& b : run.json["benchmarks"]) {
    const double base = b["configs"]["off"]["mean_s"].get<double>();
    if (base <= 0) continue;
    data << quoted(b["benchmark"].get<std::string>());
    for (const auto& c : configs)
      data << " " << b["configs"][c]["mean_s"].get<double>() / base << " "
           << b["configs"][c]["sd_s"].get<double>() / base;
    data << "\n";
  }
  std::string plot_list;
  for (std::size_t i = 0; i < configs.size(); ++i)
    plot_list += fmt::format("{}'data/context_switch.dat' using {}:{}{} title '{}'", i ? ", " : "",
                             2 + 2 * i, 3 + 2 * i, i ? "" : ":xtic(1)", configs[i]);
  return fmt::format(
      "{}set output 'context_switch.png'\nset title 'Scheduler benchmarks: run time relative to "
      "rseq registration off (mean ± standard deviation)'\nset style data histograms\n"
      "set style histogram errorbars gap 2 lw 1\nset style fill solid 0.8\nset yrange [0:*]\n"
      "set ylabel 'time / time with registration off'\nset xtics rotate by -25 scale 0\nset "
      "key outside right\nset grid ytics\nplot {}\n",
      kTerminal, plot_list);
}

}  // namespace

std::vector<plot> make_plots(const std::string& dir, const std::vector<suite_run>& runs,
                             std::string* error) {
  const std::string gnuplot = find_program("gnuplot");
  if (gnuplot.empty()) {
    *error = "gnuplot is not installed (Debian package gnuplot-nox): no plots";
    return {};
  }
  std::filesystem::create_directories(dir + "/data");
  std::vector<plot> plots;
  std::string script =
      "# Draws the report's plots: cd to the report folder, then gnuplot plots.gp\n";
  auto data = [&](const std::string& name) {
    return std::ofstream(dir + "/data/" + name + ".dat");
  };
  if (const auto* r = find_run(runs, "getcpu"); r && r->json.contains("results")) {
    auto out = data("getcpu");
    script += getcpu_plot(*r, out);
    plots.push_back({"getcpu", "getcpu.png", "getcpu cost by method, log scale"});
  }
  for (const char* name : {"counter", "list"})
    if (const auto* r = find_run(runs, name); r && r->json.contains("results")) {
      auto out = data(name);
      script +=
          scaling_plot(*r,
                       std::string(name) == "counter" ? "Counter increment: scaling with threads"
                                                      : "Free list push+pop: scaling with threads",
                       out, name);
      plots.push_back(
          {name, std::string(name) + ".png", std::string(name) + " scaling with threads"});
    }
  // Suites of several parts (results named "part: ..."): one scaling plot per part.
  const auto part_plots = [&](const char* suite,
                              std::initializer_list<std::pair<const char*, const char*>> parts) {
    const auto* r = find_run(runs, suite);
    if (!r || !r->json.contains("results")) return;
    for (const auto& [part, title] : parts) {
      const std::string out = std::string(suite) + "_" + part;
      auto file = data(out);
      script += scaling_plot(*r, title, file, out, std::string(part) + ": ");
      plots.push_back({suite, out + ".png", std::string(title) + ", by threads"});
    }
  };
  part_plots("readmostly", {{"read", "Read lock + unlock of one lock shared by all threads"},
                            {"ref", "Reference count get + put, one count shared by all threads"}});
  part_plots("metrics", {{"add", "Add 1 to one counter shared by all threads"},
                         {"limited", "limited_add(1) + sub(1), one budget shared by all threads"},
                         {"record", "Record one value into one histogram shared by all threads"}});
  if (const auto* r = find_run(runs, "pool"); r && r->json.contains("resident_bytes_per_counter")) {
    auto out = data("pool");
    script += pool_plot(*r, out);
    plots.push_back({"pool", "pool.png", "resident bytes per per-CPU counter"});
  }
  if (const auto* r = find_run(runs, "malloc"); r && r->json.contains("summary")) {
    auto rss = data("malloc_rss");
    auto latency = data("malloc_latency");
    script += malloc_plots(*r, rss, latency, plots);
  }
  if (const auto* r = find_run(runs, "context-switch"); r && r->json.contains("benchmarks")) {
    auto out = data("context_switch");
    script += context_switch_plot(*r, out);
    plots.push_back({"context-switch", "context_switch.png", "context-switch A/B"});
  }
  {
    std::ofstream out(dir + "/plots.gp");
    out << script;
  }
  child_request request;
  request.argv = {gnuplot, "plots.gp"};
  request.cwd = dir;
  request.timeout_s = 120;
  const child_result result = run_child(request);
  // A failing plot stops the script there: keep the plots drawn, and say why the rest are not.
  if (!result.ok())
    *error = "gnuplot failed (" + result.describe(request.timeout_s) + "): " + result.err;
  std::erase_if(plots, [&](const plot& p) { return !std::filesystem::exists(dir + "/" + p.file); });
  return plots;
}

}  // namespace percpu::cli
