// `percpu bench counter`: one increment of a process-wide counter, done every way people do it,
// at 1 to 256 threads (far more threads than CPUs, like the 2015 rseq benchmarks RFC's service with
// 400 threads on 16 cores). ns per increment of the whole process, medians of repetitions, ratios
// side by side.
#include <fmt/core.h>
#include <sched.h>

#include <percpu/percpu.h>
#include <atomic>
#include <memory>
#include <mutex>
#include <vector>

#include "bench/runner.h"
#include "commands.h"

namespace percpu::cli {
namespace {

const std::vector<int> kThreadCounts = {1, 2, 4, 8, 64, 256};

// The contenders. Each keeps a process-wide count that a reader could sum at any moment.
counter<std::int64_t, index_mode::cpu_id>* g_percpu_cpu;
counter<std::int64_t, index_mode::mm_cid>* g_percpu_cid;
alignas(64) std::atomic<std::int64_t> g_shared{0};

struct alignas(64) atomic_slot {
  std::atomic<std::int64_t> value{0};
};
struct alignas(64) locked_slot {
  std::mutex lock;
  std::int64_t value = 0;
};
std::unique_ptr<atomic_slot[]> g_sharded;  // indexed by sched_getcpu(): the pre-rseq way
std::unique_ptr<locked_slot[]> g_locked;   // per-CPU slot taken under a lock

// thread_local counters, registered so a reader can sum them (as per-thread caches do); an
// exiting thread folds its count into `retired` and leaves the registry.
struct registry {
  std::mutex lock;
  std::vector<std::atomic<std::int64_t>*> counters;
  std::int64_t retired = 0;
};
registry g_registry;
struct thread_counter {
  std::atomic<std::int64_t> value{0};
  thread_counter() {
    std::lock_guard<std::mutex> l(g_registry.lock);
    g_registry.counters.push_back(&value);
  }
  ~thread_counter() {
    std::lock_guard<std::mutex> l(g_registry.lock);
    g_registry.retired += value.load();
    std::erase(g_registry.counters, &value);
  }
};

int cpu_slot() {
  const int cpu = sched_getcpu();
  return cpu < 0 ? 0 : cpu;
}

std::uint64_t percpu_cpu_id(int, const std::atomic<bool>& stop) {
  return run_until(stop, [] { g_percpu_cpu->add(1); });
}
std::uint64_t percpu_mm_cid(int, const std::atomic<bool>& stop) {
  return run_until(stop, [] { g_percpu_cid->add(1); });
}
std::uint64_t shared_atomic(int, const std::atomic<bool>& stop) {
  return run_until(stop, [] { g_shared.fetch_add(1, std::memory_order_relaxed); });
}
std::uint64_t sched_getcpu_atomic(int, const std::atomic<bool>& stop) {
  return run_until(stop,
                   [] { g_sharded[cpu_slot()].value.fetch_add(1, std::memory_order_relaxed); });
}
std::uint64_t locked_slot_add(int, const std::atomic<bool>& stop) {
  return run_until(stop, [] {
    locked_slot& slot = g_locked[cpu_slot()];
    std::lock_guard<std::mutex> l(slot.lock);
    ++slot.value;
  });
}
std::uint64_t thread_local_add(int, const std::atomic<bool>& stop) {
  static thread_local thread_counter mine;
  std::atomic<std::int64_t>& value = mine.value;  // resolve the TLS address once, as users would
  // Single writer: a relaxed load+store (no lock prefix) keeps the value readable by a summer.
  return run_until(stop, [&] {
    value.store(value.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  });
}

const std::vector<contender> kContenders = {
    {"percpu counter (cpu_id)", "percpu cpu_id", percpu_cpu_id},
    {"percpu counter (mm_cid)", "percpu mm_cid", percpu_mm_cid},
    {"thread_local + registry", "thread_local", thread_local_add},
    {"sched_getcpu + atomic", "getcpu+atomic", sched_getcpu_atomic},
    {"per-CPU slot + mutex", "slot+mutex", locked_slot_add},
    {"one shared atomic", "shared atomic", shared_atomic},
};

}  // namespace

int bench_counter(const bench_options& options) {
  if (!can_write(options.json_out)) return 1;
  const registration_info reg = registration();
  const int slots = machine_topology().cpu_id_bound;
  counter<std::int64_t, index_mode::cpu_id> percpu_cpu;
  counter<std::int64_t, index_mode::mm_cid> percpu_cid;
  g_percpu_cpu = &percpu_cpu;
  g_percpu_cid = &percpu_cid;
  g_sharded = std::make_unique<atomic_slot[]>(slots);
  g_locked = std::make_unique<locked_slot[]>(slots);
  const bench_plan plan = make_plan(options, {7, 0.2}, {3, 0.05});

  register_contenders(kContenders, kThreadCounts, plan);
  const auto results = run_registered("counter");

  fmt::print(
      "percpu bench counter: wall-clock ns per increment of the whole process, median of {} "
      "repetitions (mode: {}, {} CPUs); ratios: the other's time / percpu cpu_id's\n\n",
      plan.repetitions, reg.fallback ? "fallback" : "rseq", machine_topology().allowed_cpus.size());
  std::fflush(stdout);
  print_thread_table(results, kThreadCounts, kContenders, kContenders[0].name,
                     {{"sched_getcpu + atomic", "getcpu+atomic/"}});
  const bench_result* ours1 = find_result(results, kContenders[0].name, 1);
  const bench_result* tl1 = find_result(results, "thread_local + registry", 1);
  if (ours1 && tl1)
    fmt::print(
        "\nat 1 thread the percpu counter takes {:.2f}x the time of a thread_local "
        "increment\n",
        ours1->median_ns / tl1->median_ns);
  fmt::print("percpu counters: {} (cpu_id) and {} (mm_cid) increments recorded\n",
             percpu_cpu.load(), percpu_cid.load());

  if (!options.json_out.empty()) {
    nlohmann::json extra;
    extra["mode"] = reg.fallback ? "fallback" : "rseq";
    extra["labels"] = contender_labels(kContenders);
    if (!write_json(options.json_out, "counter", results, extra)) return 1;
  }
  return 0;
}

}  // namespace percpu::cli
