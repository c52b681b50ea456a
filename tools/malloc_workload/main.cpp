// percpu-malloc-workload: runs one allocation workload and prints its results, with the process's
// peak and final resident memory, as one JSON object on stdout. `percpu bench malloc` runs it
// under LD_PRELOAD of each allocator.
#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "workload.h"

namespace {

// A "VmHWM:" or "VmRSS:" line of /proc/self/status, in KiB.
long status_kib(const std::string& field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(field, 0) == 0) return std::stol(line.substr(field.size()));
  return -1;
}

// Page faults the process took: on a VM each costs microseconds, and an allocator that keeps
// handing out memory its threads have not touched yet pays them over and over.
long minor_faults() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"percpu-malloc-workload: one allocation workload; results as JSON on stdout"};
  std::string name;
  percpu::workload::params p;
  app.add_option("workload", name,
                 "service, producer-consumer, latency, churn, large-churn, large-realloc, "
                 "large-live, larson, xmalloc, idle or mix")
      ->required()
      ->check(CLI::IsMember({"service", "producer-consumer", "latency", "churn", "large-churn",
                             "large-realloc", "large-live", "larson", "xmalloc", "idle", "mix"}));
  app.add_option("--threads", p.threads, "service: threads; churn: threads created in all")
      ->check(CLI::Range(1, 100000));
  app.add_option("--active", p.active, "service: requests at once (default: online CPUs)")
      ->check(CLI::Range(0, 4096));
  app.add_option("--pairs", p.pairs, "producer-consumer: pairs (default: online CPUs)")
      ->check(CLI::Range(0, 4096));
  app.add_option("--requests", p.requests, "service: requests in all")
      ->check(CLI::Range(1L, 1000000000L));
  app.add_option("--objects", p.objects, "producer-consumer: objects per pair")
      ->check(CLI::Range(1L, 1000000000L));
  app.add_option("--think-us", p.think_us, "service: idle µs between a thread's requests")
      ->check(CLI::Range(0, 10000000));
  app.add_option("--batches", p.batches, "latency: timed batches per size")
      ->check(CLI::Range(1, 1000000));
  app.add_option("--rounds", p.rounds, "large-*: repetitions of the pattern")
      ->check(CLI::Range(1L, 1000000000L));
  app.add_option("--megabytes", p.megabytes, "idle: MiB allocated and freed before idling")
      ->check(CLI::Range(1L, 1000000L));
  app.add_option("--idle-ms", p.idle_ms, "idle: ms without allocator calls before the end RSS")
      ->check(CLI::Range(0L, 3600000L));
  app.add_option("--seed", p.seed, "Random seed");
  CLI11_PARSE(app, argc, argv);

  percpu::workload::result r;
  if (name == "service") r = percpu::workload::run_service(p);
  if (name == "producer-consumer") r = percpu::workload::run_producer_consumer(p);
  if (name == "latency") r = percpu::workload::run_latency(p);
  if (name == "churn") r = percpu::workload::run_churn(p);
  if (name == "large-churn") r = percpu::workload::run_large_churn(p);
  if (name == "large-realloc") r = percpu::workload::run_large_realloc(p);
  if (name == "large-live") r = percpu::workload::run_large_live(p);
  if (name == "larson") r = percpu::workload::run_larson(p);
  if (name == "xmalloc") r = percpu::workload::run_xmalloc(p);
  if (name == "idle") r = percpu::workload::run_idle(p);
  if (name == "mix") r = percpu::workload::run_mix(p);

  nlohmann::json j = {{"workload", name},
                      {"seconds", r.seconds},
                      {"throughput", r.throughput},
                      {"unit", r.unit},
                      {"peak_rss_kib", status_kib("VmHWM:")},
                      {"end_rss_kib", status_kib("VmRSS:")},
                      {"minor_faults", minor_faults()}};
  if (r.p50_us >= 0) {
    j["p50_us"] = r.p50_us;
    j["p99_us"] = r.p99_us;
  }
  for (const auto& [size, ns] : r.by_size)
    j["by_size"].push_back({{"size", size}, {"p50_ns", ns.first}, {"p99_ns", ns.second}});
  std::cout << j.dump() << std::endl;
  return 0;
}
