#include "bench_runner.h"

#include <algorithm>
#include <fstream>
#include <iostream>
#include <map>

#include <unistd.h>

namespace percpu::cli {
namespace {

// Collects the individual repetitions (not Google Benchmark's own aggregates).
class collecting_reporter : public benchmark::BenchmarkReporter {
 public:
  explicit collecting_reporter(std::string suite) : suite_(std::move(suite)) {}

  bool ReportContext(const Context&) override { return true; }

  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& run : runs) {
      if (run.run_type != Run::RT_Iteration || run.error_occurred) continue;
      const std::string& name = run.run_name.function_name;
      const std::string key = name + "/threads:" + std::to_string(run.threads);
      if (index_.find(key) == index_.end()) {
        index_[key] = results_.size();
        bench_result r;
        r.name = name;
        r.threads = static_cast<int>(run.threads);
        results_.push_back(r);
        if (isatty(STDERR_FILENO))
          std::cerr << "\r[" << suite_ << "] " << key << std::string(20, ' ') << std::flush;
      }
      results_[index_[key]].samples_ns.push_back(run.GetAdjustedRealTime());
    }
  }

  std::vector<bench_result> take() {
    if (isatty(STDERR_FILENO)) std::cerr << "\r" << std::string(70, ' ') << "\r" << std::flush;
    for (auto& r : results_) {
      auto s = r.samples_ns;
      std::sort(s.begin(), s.end());
      const size_t n = s.size();
      r.median_ns = n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
      r.min_ns = s.front();
      r.max_ns = s.back();
    }
    return std::move(results_);
  }

 private:
  std::string suite_;
  std::vector<bench_result> results_;
  std::map<std::string, size_t> index_;
};

}  // namespace

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
  collecting_reporter reporter(suite);
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::ClearRegisteredBenchmarks();
  return reporter.take();
}

const bench_result* find_result(const std::vector<bench_result>& results, const std::string& name,
                                int threads) {
  for (const auto& r : results)
    if (r.name == name && r.threads == threads) return &r;
  return nullptr;
}

bool can_write(const std::string& path) {
  if (path.empty()) return true;
  std::ofstream out(path, std::ios::app);
  if (!out) std::cerr << "percpu: cannot write " << path << "\n";
  return static_cast<bool>(out);
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
  std::ofstream out(path);
  out << j.dump(2) << "\n";
  if (!out) std::cerr << "percpu: cannot write " << path << "\n";
  return static_cast<bool>(out);
}

}  // namespace percpu::cli
