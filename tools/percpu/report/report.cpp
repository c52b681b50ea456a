// `percpu bench` with no suite: the full report. Each suite runs as a child process of this
// command (`percpu bench <options> --json raw/<suite>.json <suite>`), so every suite starts from
// a fresh process, as when run alone; its tables and JSON land in the report folder, and a
// progress line shows the suite, its step and the time left.
#include <fmt/chrono.h>
#include <fmt/core.h>
#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "bench/runner.h"
#include "commands.h"
#include "common/child_process.h"
#include "report/report.h"

namespace percpu::cli {
namespace {

/// A suite of the report, with what it costs here (2-CPU VM, seconds) so the progress line can
/// estimate the time left before the suite has said anything about its own progress.
struct suite_spec {
  const char* name;
  const char* title;
  double quick_s;
  double thorough_s;
  int quick_reps;  // the suite's default repetitions, to scale estimates by --repetitions
  int thorough_reps;
  bool per_allocator = false;  // its times are for every allocator (kMallocAllocators), and
                               // scale with the number --allocators names
};

// Quick times as measured on a clean clone's run of the main job (`percpu bench --quick`, every
// allocator installed): the estimate the report starts with, before the suites report progress.
const std::vector<suite_spec> kSuites = {
    {"getcpu", "getcpu: which CPU am I on?", 3, 20, 5, 9},
    {"ops", "ops: each primitive against a hand-written sequence, librseq and atomics", 44, 100, 3,
     7},
    {"counter", "counter: a per-CPU counter against the alternatives", 20, 90, 3, 7},
    {"readmostly",
     "readmostly: percpu_rwsem and percpu_ref against reader-writer locks, RCU and atomics", 18,
     110, 3, 7},
    {"metrics",
     "metrics: the batched percpu_counter and the histogram against atomics, tbb::combinable "
     "and prometheus-cpp",
     20, 95, 3, 7},
    {"list", "list: a per-CPU free list against a Treiber stack and a mutex", 12, 60, 3, 7},
    {"pool", "pool: per-CPU memory, resident bytes and allocation cost", 9, 45, 3, 7},
    {"malloc", "malloc: percpu malloc against glibc, jemalloc, tcmalloc, mimalloc", 400, 480, 3, 5,
     true},
    {"slice", "slice: locks whose holders ask not to be preempted (time-slice extension)", 2, 45, 3,
     5},
    {"context-switch", "context switch: what registering rseq costs the scheduler", 83, 330, 8, 20},
};

double estimate(const suite_spec& s, const bench_options& o) {
  double base = o.quick ? s.quick_s : s.thorough_s;
  const int reps = o.quick ? s.quick_reps : s.thorough_reps;
  if (s.per_allocator && !o.allocators.empty())
    base *= static_cast<double>(o.allocators.size()) / kMallocAllocators.size();
  return o.repetitions > 0 ? base * o.repetitions / reps : base;
}

std::string clock_text(double seconds) {
  const int s = static_cast<int>(seconds + 0.5);
  return fmt::format("{}:{:02}", s / 60, s % 60);
}

// The progress line: "[report 2/6 counter] 12/36: <step> | 1:05 elapsed, about 3:20 left".
// On a terminal it rewrites itself; elsewhere (a log) it prints a line when a suite starts or
// ends and at most every 30 s in between.
class progress {
 public:
  progress(std::vector<double> estimates)
      : estimates_(std::move(estimates)), tty_(isatty(STDERR_FILENO)), start_(now()) {}

  void start_suite(std::size_t i, const std::string& name) {
    index_ = i;
    name_ = name;
    step_.clear();
    suite_start_ = now();
    render(true);
  }

  void finish_suite(double seconds) {
    done_estimate_ += estimates_[index_];
    done_actual_ += seconds;
    if (!tty_) std::cerr << fmt::format("[report] {} finished in {}\n", name_, clock_text(seconds));
  }

  // A chunk of the running suite's standard error: "\r[suite] step" fragments are progress;
  // anything else is a message, shown on a line of its own and kept in `log`.
  void feed(std::string_view chunk, std::string& log) {
    for (char c : chunk) {
      if (c != '\r' && c != '\n') {
        pending_ += c;
        continue;
      }
      take_fragment(log);
    }
  }

  void end() {
    if (tty_) std::cerr << "\r\033[K" << std::flush;
  }

  // Seconds left: the rest of this suite plus the estimates of the suites after it, all scaled
  // by how the finished suites compared with their estimates. The rest of this suite blends
  // its estimate with its own rate (done/total steps, when it reports them), trusting the rate
  // as more steps are done: the first steps of a suite are not typical of the rest, and a
  // rate from them alone made the first figure jump by a minute within seconds.
  double seconds_left() const {
    const double scale = done_estimate_ > 0 ? done_actual_ / done_estimate_ : 1.0;
    double later = 0;
    for (std::size_t i = index_ + 1; i < estimates_.size(); ++i) later += estimates_[i];
    const double elapsed = since(suite_start_);
    double current = std::max(0.0, estimates_[index_] * scale - elapsed);
    if (done_ >= 1 && total_ > done_) {
      const double by_rate = elapsed * (total_ - done_) / done_;
      const double trust = static_cast<double>(done_) / total_;
      current = trust * by_rate + (1 - trust) * current;
    }
    return current + later * scale;
  }

 private:
  using clock = std::chrono::steady_clock;
  static clock::time_point now() { return clock::now(); }
  static double since(clock::time_point t) {
    return std::chrono::duration<double>(now() - t).count();
  }

  void take_fragment(std::string& log) {
    std::string text = std::move(pending_);
    pending_.clear();
    while (!text.empty() && text.back() == ' ') text.pop_back();
    if (text.empty()) return;
    if (text.front() == '[' && text.find("] ") != std::string::npos) {
      step_ = text.substr(text.find("] ") + 2);
      done_ = total_ = 0;
      if (std::sscanf(step_.c_str(), "%d/%d", &done_, &total_) != 2) done_ = total_ = 0;
      render(false);
      return;
    }
    log += text + "\n";
    if (tty_) std::cerr << "\r\033[K";
    std::cerr << "  " << name_ << ": " << text << "\n";
    render(true);
  }

  void render(bool force) {
    const std::string line = fmt::format(
        "[report {}/{} {}] {} | {} elapsed, about {} left", index_ + 1, estimates_.size(), name_,
        step_.empty() ? "starting" : step_, clock_text(since(start_)), clock_text(seconds_left()));
    if (tty_) {
      std::cerr << "\r\033[K" << line.substr(0, 150) << std::flush;
    } else if (force || since(last_print_) >= 30) {
      std::cerr << line << "\n";
      last_print_ = now();
    }
  }

  std::vector<double> estimates_;
  bool tty_;
  clock::time_point start_, suite_start_, last_print_;
  std::size_t index_ = 0;
  std::string name_, step_, pending_;
  int done_ = 0, total_ = 0;
  double done_estimate_ = 0, done_actual_ = 0;
};

// The process group of the suite running now (0: none). A signal that stops the report stops
// the suite and everything it started (hackbench's and perf's own children included: they stay
// in the suite's group), instead of leaving them running on their own.
volatile sig_atomic_t g_suite_group = 0;

extern "C" void stop_report(int sig) {
  if (g_suite_group > 0) kill(-g_suite_group, SIGKILL);
  signal(sig, SIG_DFL);
  raise(sig);
}

void stop_suites_with_the_report() {
  struct sigaction sa {};
  sa.sa_handler = stop_report;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaction(sig, &sa, nullptr);
}

suite_run run_suite(const suite_spec& spec, const bench_options& options, const std::string& dir,
                    progress& bar) {
  suite_run run;
  run.name = spec.name;
  const std::string json_path = dir + "/raw/" + run.name + ".json";
  std::filesystem::remove(json_path);
  child_request request;
  request.argv = {self_dir() + "/percpu", "bench"};
  if (options.quick) request.argv.push_back("--quick");
  if (options.repetitions > 0) {
    request.argv.push_back("--repetitions");
    request.argv.push_back(std::to_string(options.repetitions));
  }
  if (run.name == "malloc" && !options.allocators.empty())
    request.argv.insert(request.argv.end(),
                        {"--allocators", fmt::format("{}", fmt::join(options.allocators, ","))});
  request.argv.insert(request.argv.end(), {"--json", json_path, run.name});
  request.set_env = {"PERCPU_BENCH_PROGRESS=1"};
  request.timeout_s = 3600;
  std::string log;
  request.on_stderr = [&](std::string_view chunk) { bar.feed(chunk, log); };
  request.new_process_group = true;
  request.on_started = [](int pid) { g_suite_group = pid; };
  const auto start = std::chrono::steady_clock::now();
  const child_result result = run_child(request);
  g_suite_group = 0;
  run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  run.text = result.out;
  std::ofstream(dir + "/raw/" + run.name + ".txt") << result.out;
  if (!log.empty()) std::ofstream(dir + "/raw/" + run.name + ".log") << log;
  try {
    std::ifstream in(json_path);
    if (in) run.json = nlohmann::json::parse(in);
  } catch (const std::exception&) {
    run.json = nullptr;
  }
  run.ok = result.ok() && !run.json.is_null();
  if (run.json.is_null()) std::filesystem::remove(json_path);  // an empty file, if any
  if (!run.ok)
    run.failure =
        fmt::format("`percpu bench {}` {}{}", run.name, result.describe(request.timeout_s),
                    run.json.is_null() ? ", no JSON written" : "");
  return run;
}

// Removes what an earlier report wrote into `dir` (by name: the folder may hold other files,
// which stay), so nothing stale passes for this run's, and leaves a report.md that says a run
// is under way, which stays if the run is stopped. False when the folder cannot be written.
bool prepare_folder(const std::string& dir, const std::string& command) {
  namespace fs = std::filesystem;
  std::error_code ec;
  for (const auto& s : kSuites)
    for (const char* ext : {".json", ".txt", ".log"}) fs::remove(dir + "/raw/" + s.name + ext, ec);
  for (const char* plot : kPlotNames) {
    fs::remove(dir + "/" + plot + ".png", ec);
    fs::remove(dir + "/data/" + plot + ".dat", ec);
  }
  for (const char* file : {"results.json", "plots.gp", "data"}) fs::remove(dir + "/" + file, ec);
  ec.clear();
  fs::create_directories(dir + "/raw", ec);
  if (ec) {
    std::cerr << "percpu bench: cannot write the report folder " << dir << ": " << ec.message()
              << "\n";
    return false;
  }
  return write_text_file(dir + "/report.md", "# percpu benchmark report\n\n`" + command +
                                                 "` is running, or was stopped before it "
                                                 "finished: no results yet.\n");
}

std::string command_line(const bench_options& options, const std::vector<std::string>& suites) {
  std::string c = "percpu bench";
  if (options.quick) c += " --quick";
  if (options.repetitions > 0) c += fmt::format(" --repetitions {}", options.repetitions);
  if (!suites.empty()) c += " --suites " + fmt::format("{}", fmt::join(suites, ","));
  if (!options.allocators.empty())
    c += " --allocators " + fmt::format("{}", fmt::join(options.allocators, ","));
  return c;
}

std::string markdown(const std::vector<suite_run>& runs, const std::vector<plot>& plots,
                     const std::string& plot_error, const std::string& info_text,
                     const nlohmann::json& info, const std::string& command, double seconds) {
  std::string md = "# percpu benchmark report\n\n";
  const std::time_t t = std::time(nullptr);
  md += fmt::format("`{}`, {:%Y-%m-%d %H:%M} UTC, {} in all. On {}.\n\n", command, fmt::gmtime(t),
                    clock_text(seconds), environment_line(info));
  md +=
      "Every comparison below was measured side by side in this run. Tables give medians; "
      "`~` marks a result whose repetitions varied by more than 20% (the machine was busy: read "
      "it as noisy), `!` a context-switch difference beyond the noise.\n\n";
  md += "## Summary\n\n" + summary_table(runs) + "\n";
  for (const auto& r : runs)
    if (!r.ok)
      md += fmt::format("- **{} failed**: {} (see raw/{}.log)\n", r.name, r.failure, r.name);
  if (!plot_error.empty()) md += "- **Plots missing**: " + plot_error + "\n";
  md += "\n## The machine (`percpu info`)\n\n```text\n" + info_text + "```\n";
  for (const auto& r : runs) {
    const auto spec = std::find_if(kSuites.begin(), kSuites.end(),
                                   [&](const suite_spec& s) { return r.name == s.name; });
    md += fmt::format("\n## {}\n\n", spec->title);
    md += (r.json.is_null() ? "The suite failed: " + r.failure + "." : suite_sentence(r)) + "\n\n";
    for (const auto& p : plots)
      if (p.suite == r.name) md += fmt::format("![{}]({})\n\n", p.title, p.file);
    md += fmt::format("`percpu bench {}`, {}{}:\n\n```text\n{}```\n", r.name, clock_text(r.seconds),
                      r.json.is_null() ? "" : fmt::format(" (raw results: raw/{}.json)", r.name),
                      r.text);
  }
  md +=
      "\n## Files\n\n`results.json` holds every suite's raw results and `percpu info --json`; "
      "`raw/` each suite's output, JSON and messages; `data/` and `plots.gp` the plots' data "
      "and gnuplot script (`gnuplot plots.gp` in this folder draws them again).\n";
  return md;
}

}  // namespace

int bench_report(const bench_options& options, const std::string& out_dir,
                 const std::vector<std::string>& suites) {
  std::vector<suite_spec> chosen;
  for (const auto& s : kSuites)
    if (suites.empty() || std::find(suites.begin(), suites.end(), s.name) != suites.end())
      chosen.push_back(s);
  if (!prepare_folder(out_dir, command_line(options, suites))) return 1;  // it said why
  std::vector<double> estimates;
  double total = 0;
  for (const auto& s : chosen) total += estimates.emplace_back(estimate(s, options));
  std::cerr << fmt::format("percpu bench: {} suites into {}/ (estimated {} on a 2-CPU VM)\n",
                           chosen.size(), out_dir, clock_text(total));

  stop_suites_with_the_report();
  const auto start = std::chrono::steady_clock::now();
  progress bar(estimates);
  std::vector<suite_run> runs;
  for (std::size_t i = 0; i < chosen.size(); ++i) {
    bar.start_suite(i, chosen[i].name);
    runs.push_back(run_suite(chosen[i], options, out_dir, bar));
    bar.finish_suite(runs.back().seconds);
  }
  bar.end();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  child_request info_request;
  info_request.argv = {self_dir() + "/percpu", "info"};
  const std::string info_text = run_child(info_request).out;
  const nlohmann::json info = info_json();
  std::string plot_error;
  const std::vector<plot> plots = make_plots(out_dir, runs, &plot_error);

  nlohmann::json all = {
      {"command", command_line(options, suites)}, {"seconds", seconds}, {"info", info}};
  for (const auto& r : runs)
    all["suites"][r.name] = {{"ok", r.ok}, {"seconds", r.seconds}, {"results", r.json}};
  if (!write_text_file(out_dir + "/results.json", all.dump(2) + "\n") ||
      !write_text_file(out_dir + "/report.md", markdown(runs, plots, plot_error, info_text, info,
                                                        command_line(options, suites), seconds)))
    return 1;

  std::cout << "# Summary (" << out_dir << "/report.md)\n\n" << summary_table(runs) << "\n";
  int failed = 0;
  for (const auto& r : runs)
    if (!r.ok) {
      ++failed;
      std::cout << "FAILED: " << r.failure << "\n";
    }
  if (!plot_error.empty()) std::cout << "plots missing: " << plot_error << "\n";
  std::cout << fmt::format("report: {}/report.md ({} plots, {} in all)\n", out_dir, plots.size(),
                           clock_text(seconds));
  return failed ? 1 : 0;
}

}  // namespace percpu::cli
