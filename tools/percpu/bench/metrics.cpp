// `percpu bench metrics`: the batched counter (percpu_counter) against what programs count
// with. Three parts, each at 1, 2, 4, ... up to 4x the CPUs, all threads on one counter:
//   add:     one add of 1 (percpu_counter in both index modes, percpu::counter whose read is
//            exact, one std::atomic, tbb::combinable's thread-local element), and the two
//            per-CPU adds through a call as well as inlined;
//   read:    one read of the value (percpu_counter's read() and sum(), percpu::counter's load(),
//            std::atomic's load, tbb::combinable's combine()), with no thread writing;
//   limited: a budget's charge and release, limited_add(1, limit) + sub(1) far below the limit,
//            against a compare-and-swap loop on one std::atomic;
//   record:  one value into one histogram shared by all threads (percpu::histogram in both index
//            modes, inlined and through a call, against prometheus-cpp's Histogram::Observe and
//            Counter::Increment and an array under a std::mutex with the same layout).
// ns per operation of the whole process, medians of repetitions, ratios side by side.
#include <fmt/core.h>

#include <percpu/percpu.h>
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <vector>

#ifdef PERCPU_HAVE_TBB
#include <oneapi/tbb/combinable.h>
#endif

#ifdef PERCPU_HAVE_PROMETHEUS
#include <prometheus/counter.h>
#include <prometheus/histogram.h>
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

// ---- record ----
// The histograms' layout (1/128 precision up to one hour in ns), and the values recorded:
// latency-like, 64 ns .. 64 us, from a per-thread xorshift (one multiply-free step per value).
const histogram_layout kLayout;
histogram<index_mode::cpu_id>* g_histogram_cpu;
histogram<index_mode::mm_cid>* g_histogram_cid;
// A mutex-protected histogram: what a program writes without per-CPU data.
struct locked_histogram {
  std::mutex mutex;
  std::vector<std::uint64_t> counts = std::vector<std::uint64_t>(kLayout.bucket_count());
  std::uint64_t sum = 0;
  void record(std::uint64_t v) {
    const std::size_t i = kLayout.index_of(v);
    const std::lock_guard<std::mutex> hold(mutex);
    ++counts[i];
    sum += v;
  }
};
locked_histogram* g_locked;
#ifdef PERCPU_HAVE_PROMETHEUS
prometheus::Histogram* g_prom_histogram;
prometheus::Counter* g_prom_counter;
#endif

struct value_stream {
  std::uint64_t x;
  explicit value_stream(int thread) : x(0x9e3779b97f4a7c15ull * (thread + 1)) {}
  std::uint64_t next() {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return 64 + (x & 0xffff);
  }
};

std::uint64_t record_cpu(int t, const std::atomic<bool>& stop) {
  value_stream v(t);
  return run_until(stop, [&] { g_histogram_cpu->record(v.next()); });
}
std::uint64_t record_cid(int t, const std::atomic<bool>& stop) {
  value_stream v(t);
  return run_until(stop, [&] { g_histogram_cid->record(v.next()); });
}
[[gnu::noinline]] void record_call(histogram<index_mode::cpu_id>& h, std::uint64_t v) {
  h.record(v);
}
std::uint64_t record_cpu_call(int t, const std::atomic<bool>& stop) {
  value_stream v(t);
  return run_until(stop, [&] { record_call(*g_histogram_cpu, v.next()); });
}
std::uint64_t record_locked(int t, const std::atomic<bool>& stop) {
  value_stream v(t);
  return run_until(stop, [&] { g_locked->record(v.next()); });
}
#ifdef PERCPU_HAVE_PROMETHEUS
std::uint64_t record_prometheus(int t, const std::atomic<bool>& stop) {
  value_stream v(t);
  return run_until(stop, [&] { g_prom_histogram->Observe(static_cast<double>(v.next())); });
}
std::uint64_t increment_prometheus(int, const std::atomic<bool>& stop) {
  return run_until(stop, [] { g_prom_counter->Increment(); });
}
#endif

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

std::vector<contender> record_contenders() {
  std::vector<contender> c = {
      {"record: percpu histogram (cpu_id)", "histogram cpu_id", record_cpu},
      {"record: percpu histogram (mm_cid)", "histogram mm_cid", record_cid},
      {"record: percpu histogram (cpu_id), through a call", "histogram call", record_cpu_call},
      {"record: array under a std::mutex", "std::mutex array", record_locked},
  };
#ifdef PERCPU_HAVE_PROMETHEUS
  c.push_back(
      {"record: prometheus-cpp Histogram::Observe", "prometheus Observe", record_prometheus});
  c.push_back(
      {"record: prometheus-cpp Counter::Increment", "prometheus Increment", increment_prometheus});
#endif
  return c;
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
  histogram<index_mode::cpu_id> histogram_cpu(kLayout);
  histogram<index_mode::mm_cid> histogram_cid(kLayout);
  g_histogram_cpu = &histogram_cpu;
  g_histogram_cid = &histogram_cid;
  locked_histogram locked;
  g_locked = &locked;
#ifdef PERCPU_HAVE_PROMETHEUS
  // prometheus-cpp's own objects, as its Registry makes them: 12 buckets over the values' range
  // (Observe searches them), and a counter.
  prometheus::Histogram prom_histogram(prometheus::Histogram::BucketBoundaries{
      64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072});
  prometheus::Counter prom_counter;
  g_prom_histogram = &prom_histogram;
  g_prom_counter = &prom_counter;
#endif
  const bench_plan plan = make_plan(options, {7, 0.2}, {3, 0.05});
  // Warm up (pages, caches, the clock's speed) before the first measurement, which is ours.
  for (int i = 0; i < 20000000; ++i) batched_cpu.add(1);
  const std::vector<int> threads = cpu_scaled_thread_counts();
  const std::vector<contender> adds = add_contenders(), reads = read_contenders(),
                               limited = limited_contenders(), records = record_contenders();
  register_contenders(adds, threads, plan);
  register_contenders(reads, threads, plan);
  register_contenders(limited, threads, plan);
  register_contenders(records, threads, plan);
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

  fmt::print("\nrecord one value (64 ns .. 64 us) into one histogram shared by all threads:\n");
  std::fflush(stdout);
  print_thread_table(results, threads, records, records[0].name,
                     {{"record: array under a std::mutex", "mutex/"},
                      {"record: prometheus-cpp Histogram::Observe", "Observe/"}});

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

  for (int n : {1, 2}) {
    const bench_result* h = find_result(results, records[0].name, n);
    const bench_result* o = find_result(results, "record: prometheus-cpp Histogram::Observe", n);
    if (h && o)
      fmt::print(
          "at {} thread{} a histogram record takes {:.2f} ns, {:.2f}x faster than "
          "prometheus-cpp's Observe ({:.2f} ns)\n",
          n, n == 1 ? "" : "s", h->median_ns, o->median_ns / h->median_ns, o->median_ns);
  }

  if (!options.json_out.empty()) {
    nlohmann::json extra;
    extra["mode"] = reg.fallback ? "fallback" : "rseq";
    nlohmann::json labels = contender_labels(adds);
    labels.update(contender_labels(reads));
    labels.update(contender_labels(limited));
    labels.update(contender_labels(records));
    extra["labels"] = labels;
    extra["threads"] = threads;
    extra["cpus"] = cpus;
    extra["batch"] = batched_cpu.batch();
    if (!write_json(options.json_out, "metrics", results, extra)) return 1;
  }
  return 0;
}

}  // namespace percpu::cli
