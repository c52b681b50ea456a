// The benchmark report (`percpu bench` with no suite): the parts its files share.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace percpu::cli {

/// One suite of the report, as it ran in its child process.
struct suite_run {
  std::string name;     ///< "getcpu", "counter", "list", "pool", "malloc", "context-switch"
  bool ok = false;      ///< exited with status 0 and wrote its JSON
  double seconds = 0;   ///< wall time of the child
  std::string text;     ///< what it printed (its tables)
  nlohmann::json json;  ///< what it wrote with --json (null when it wrote nothing readable)
  std::string failure;  ///< why it failed, when it did
};

/// The suite named `name` among `runs` when it produced JSON, else nullptr.
const suite_run* find_run(const std::vector<suite_run>& runs, const std::string& name);

/// One PNG the report shows.
struct plot {
  std::string suite;  ///< the section it belongs to
  std::string file;   ///< e.g. "counter.png", relative to the report folder
  std::string title;  ///< alt text and caption
};

/// The plots a report can draw: <name>.png, from data/<name>.dat.
inline constexpr const char* kPlotNames[] = {
    "getcpu", "counter", "list", "pool", "malloc_rss", "malloc_latency", "context_switch"};

/// Writes the plots' data (data/*.dat) and gnuplot script (plots.gp) into `dir`, then runs
/// gnuplot there (pngcairo). Returns the plots drawn. When gnuplot is missing or fails, says
/// why in `*error` (the report then says it too) and returns those drawn before the failure.
std::vector<plot> make_plots(const std::string& dir, const std::vector<suite_run>& runs,
                             std::string* error);

/// The summary table: each published claim (the getcpu_cache patch set, glibc's rseq getcpu
/// patch, the rseq merge, the 2015 rseq benchmarks RFC, the 2011 cpumask sizing thread), its
/// figure and source, ours, and our ratio,
/// in Markdown.
std::string summary_table(const std::vector<suite_run>& runs);

/// What a suite shows, in one or two sentences computed from its JSON.
std::string suite_sentence(const suite_run& run);

}  // namespace percpu::cli
