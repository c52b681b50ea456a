// `percpu bench metrics`: the batched counter (percpu_counter) against what programs count
// with. Three parts, each at 1, 2, 4, ... up to 4x the CPUs, all threads on one counter:
//   add:     one add of 1 (percpu_counter in both index modes, percpu::counter whose read is
//            exact, one std::atomic, tbb::combinable's thread-local element), and the two
//            per-CPU adds through a call as well as inlined;
//   read:    one read of the value (percpu_counter's read() and sum(), percpu::counter's load(),
//            std::atomic's load, tbb::combinable's combine()), with no thread writing;
//   limited: a budget's charge and release, limited_add(1, limit) + sub(1) far below the limit,
//            against a compare-and-swap loop on one std::atomic.
// ns per operation of the whole process, medians of repetitions, ratios side by side.
#include <fmt/core.h>

#include <percpu/percpu.h>
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <vector>

#ifdef PERCPU_HAVE_TBB
#include <oneapi/tbb/combinable.h>
#endif

#include "bench/runner.h"
#include "commands.h"

namespace percpu::cli {
namespace {

percpu_counter<index_mode::cpu_id>* g_batched_cpu;
percpu_counter<index_mode::mm_cid>* g_batched_cid;
counter<std::int64_t, index_mode::cpu_id>* g_exact;
// Reached through a pointer, as the counters are: a program's counter is an object it points to.
struct alignas(64) shared_atomic {
  std::atomic<std::int64_t> value{0};
};
shared_atomic* g_atomic_object;
#ifdef PERCPU_HAVE_TBB
tbb::combinable<std::int64_t>* g_combinable;
#endif

// A limit the benchmark never reaches: the charges stay on the fast path.
constexpr std::int64_t kLimit = std::int64_t{1} << 50;

// ---- add ----
std::uint64_t add_batched_cpu(int, const std::atomic<bool>& stop) {
  return run_until(stop, [] { g_batched_cpu->add(1); });
}
std::uint64_t add_batched_cid(int, const std::atomic<bool>& stop) {
  return run_until(stop, [] { g_batched_cid->add(1); });
}
std::uint64_t add_exact(int, const std::atomic<bool>& stop) {
  return run_until(stop, [] { g_exact->add(1); });
}
std::uint64_t add_atomic(int, const std::atomic<bool>& stop) {
  return run_until(stop, [] { g_atomic_object->value.fetch_add(1, std::memory_order_relaxed); });
}
#ifdef PERCPU_HAVE_TBB
std::uint64_t add_combinable(int, const std::atomic<bool>& stop) {
  return run_until(stop, [] { ++g_combinable->local(); });
}
#endif

// The same adds through a call: what a caller pays where the add is not inlined into its loop.
[[gnu::noinline]] void batched_add_call(percpu_counter<index_mode::cpu_id>& c, std::int64_t n) {
  c.add(n);
}
[[gnu::noinline]] void exact_add_call(counter<std::int64_t, index_mode::cpu_id>& c,
                                      std::int64_t n) {
  c.add(n);
}
std::uint64_t add_batched_call(int, const std::atomic<bool>& stop) {
  return run_until(stop, [] { batched_add_call(*g_batched_cpu, 1); });
}
std::uint64_t add_exact_call(int, const std::atomic<bool>& stop) {
  return run_until(stop, [] { exact_add_call(*g_exact, 1); });
}

// ---- read ----
std::uint64_t read_batched(int, const std::atomic<bool>& stop) {
  return run_until(stop, [] { benchmark::DoNotOptimize(g_batched_cpu->read()); });
}
std::uint64_t sum_batched(int, const std::atomic<bool>& stop) {
  return run_until(stop, [] { benchmark::DoNotOptimize(g_batched_cpu->sum()); });
}
std::uint64_t load_exact(int, const std::atomic<bool>& stop) {
  return run_until(stop, [] { benchmark::DoNotOptimize(g_exact->load()); });
}
std::uint64_t load_atomic(int, const std::atomic<bool>& stop) {
  return run_until(stop, [] {
    benchmark::DoNotOptimize(g_atomic_object->value.load(std::memory_order_relaxed));
  });
}
#ifdef PERCPU_HAVE_TBB
std::uint64_t combine_combinable(int, const std::atomic<bool>& stop) {
  return run_until(stop, [] {
    benchmark::DoNotOptimize(
        g_combinable->combine([](std::int64_t a, std::int64_t b) { return a + b; }));
  });
}
#endif

// ---- limited ----
std::uint64_t limited_batched_cpu(int, const std::atomic<bool>& stop) {
  return run_until(stop, [] {
    if (g_batched_cpu->limited_add(1, kLimit)) g_batched_cpu->sub(1);
  });
}
std::uint64_t limited_batched_cid(int, const std::atomic<bool>& stop) {
  return run_until(stop, [] {
    if (g_batched_cid->limited_add(1, kLimit)) g_batched_cid->sub(1);
  });
}
std::uint64_t limited_atomic(int, const std::atomic<bool>& stop) {
  return run_until(stop, [] {
    std::int64_t c = g_atomic_object->value.load(std::memory_order_relaxed);
    while (c + 1 <= kLimit &&
           !g_atomic_object->value.compare_exchange_weak(c, c + 1, std::memory_order_relaxed)) {
    }
    g_atomic_object->value.fetch_sub(1, std::memory_order_relaxed);
  });
}

std::vector<contender> add_contenders() {
  std::vector<contender> c = {
      {"add: percpu_counter (cpu_id)", "percpu_counter cpu_id", add_batched_cpu},
      {"add: percpu_counter (mm_cid)", "percpu_counter mm_cid", add_batched_cid},
      {"add: percpu counter (exact read)", "counter (exact)", add_exact},
      {"add: percpu_counter (cpu_id), through a call", "percpu_counter call", add_batched_call},
      {"add: percpu counter (exact read), through a call", "counter call", add_exact_call},
      {"add: one std::atomic", "std::atomic", add_atomic},
  };
#ifdef PERCPU_HAVE_TBB
  c.push_back({"add: tbb::combinable", "tbb::combinable", add_combinable});
#endif
  return c;
}

std::vector<contender> read_contenders() {
  std::vector<contender> c = {
      {"read: percpu_counter read()", "read()", read_batched},
      {"read: percpu_counter sum()", "sum()", sum_batched},
      {"read: percpu counter load() (exact)", "counter load()", load_exact},
      {"read: std::atomic load", "atomic load", load_atomic},
  };
#ifdef PERCPU_HAVE_TBB
  c.push_back({"read: tbb::combinable combine()", "combine()", combine_combinable});
#endif
  return c;
}

std::vector<contender> limited_contenders() {
  return {
      {"limited: percpu_counter (cpu_id)", "percpu_counter cpu_id", limited_batched_cpu},
      {"limited: percpu_counter (mm_cid)", "percpu_counter mm_cid", limited_batched_cid},
      {"limited: std::atomic CAS loop", "std::atomic CAS", limited_atomic},
  };
}

}  // namespace

int bench_metrics(const bench_options& options) {
  if (!can_write(options.json_out)) return 1;
  const registration_info reg = registration();
  percpu_counter<index_mode::cpu_id> batched_cpu;
  percpu_counter<index_mode::mm_cid> batched_cid;
  counter<std::int64_t, index_mode::cpu_id> exact;
  g_batched_cpu = &batched_cpu;
  g_batched_cid = &batched_cid;
  g_exact = &exact;
  shared_atomic atomic_object;
  g_atomic_object = &atomic_object;
#ifdef PERCPU_HAVE_TBB
  tbb::combinable<std::int64_t> combinable;
  g_combinable = &combinable;
#endif
  const bench_plan plan = make_plan(options, {7, 0.2}, {3, 0.05});
  // Warm up (pages, caches, the clock's speed) before the first measurement, which is ours.
  for (int i = 0; i < 20000000; ++i) batched_cpu.add(1);
  const std::vector<int> threads = cpu_scaled_thread_counts();
  const std::vector<contender> adds = add_contenders(), reads = read_contenders(),
                               limited = limited_contenders();
  register_contenders(adds, threads, plan);
  register_contenders(reads, threads, plan);
  register_contenders(limited, threads, plan);
  const auto results = run_registered("metrics");
  const int cpus = static_cast<int>(machine_topology().allowed_cpus.size());

  fmt::print(
      "percpu bench metrics: wall-clock ns per operation of the whole process, median of {} "
      "repetitions (mode: {}, {} CPUs, percpu_counter's batch {}); ratios: the other's time / "
      "percpu_counter cpu_id's\n\n",
      plan.repetitions, reg.fallback ? "fallback" : "rseq", cpus, batched_cpu.batch());
  fmt::print("add 1 to one counter shared by all threads:\n");
  std::fflush(stdout);
  print_thread_table(
      results, threads, adds, adds[0].name,
      {{"add: percpu counter (exact read)", "counter/"}, {"add: one std::atomic", "atomic/"}});
  fmt::print("\nread the counter (no thread writing):\n");
  std::fflush(stdout);
  print_thread_table(results, threads, reads, reads[0].name,
                     {{"read: percpu_counter sum()", "sum/"},
                      {"read: percpu counter load() (exact)", "load/"},
                      {"read: std::atomic load", "atomic/"}});
  fmt::print("\na budget's charge and release, limited_add(1) + sub(1) far below the limit:\n");
  std::fflush(stdout);
  print_thread_table(results, threads, limited, limited[0].name,
                     {{"limited: std::atomic CAS loop", "atomic/"}});

  const bench_result* a1 = find_result(results, adds[0].name, 1);
  const bench_result* e1 = find_result(results, "add: percpu counter (exact read)", 1);
  const bench_result* r1 = find_result(results, reads[0].name, 1);
  const bench_result* l1 = find_result(results, "read: std::atomic load", 1);
  const bench_result* ac = find_result(results, "add: percpu_counter (cpu_id), through a call", 1);
  const bench_result* ec =
      find_result(results, "add: percpu counter (exact read), through a call", 1);
  if (a1 && e1 && r1 && l1 && ac && ec)
    fmt::print(
        "\nat 1 thread a percpu_counter add takes {:.2f}x one percpu counter add inlined ({:.2f} "
        "vs {:.2f} ns) and {:.2f}x through a call ({:.2f} vs {:.2f} ns); its read() {:.2f}x one "
        "relaxed atomic load ({:.2f} vs {:.2f} ns)\n",
        a1->median_ns / e1->median_ns, a1->median_ns, e1->median_ns, ac->median_ns / ec->median_ns,
        ac->median_ns, ec->median_ns, r1->median_ns / l1->median_ns, r1->median_ns, l1->median_ns);

  if (!options.json_out.empty()) {
    nlohmann::json extra;
    extra["mode"] = reg.fallback ? "fallback" : "rseq";
    nlohmann::json labels = contender_labels(adds);
    labels.update(contender_labels(reads));
    labels.update(contender_labels(limited));
    extra["labels"] = labels;
    extra["threads"] = threads;
    extra["cpus"] = cpus;
    extra["batch"] = batched_cpu.batch();
    if (!write_json(options.json_out, "metrics", results, extra)) return 1;
  }
  return 0;
}

}  // namespace percpu::cli
