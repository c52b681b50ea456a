// `percpu bench ops`: each per-CPU primitive of percpu, in both index modes, at 1 thread and at
// one thread per allowed CPU, side by side with the same operation written three other ways: a
// hand-written minimal rseq sequence (the limit), librseq's (when percpu was built with it), and
// atomic instructions on the same per-CPU slots (what code without rseq does). Every contender
// runs once per round and the rounds alternate, so drift of a noisy machine spreads over all of
// them; the table gives medians, their spread, and percpu's ratio to each.
#include <fmt/core.h>
#include <sched.h>
#include <unistd.h>

#include <percpu/percpu.h>
#include <algorithm>
#include <array>
#include <cstdio>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <tuple>
#include <utility>
#include <vector>

#include "bench/ops.h"
#include "bench/ops_c.h"
#include "bench/runner.h"
#include "commands.h"
#include "common/ab_stats.h"

namespace percpu::cli {
namespace {

const char* primitive_name(op_primitive p) {
  switch (p) {
    case op_primitive::current_cpu:
      return "current_cpu";
    case op_primitive::current_mm_cid:
      return "current_mm_cid";
    case op_primitive::counter_add:
      return "counter add";
    case op_primitive::lock_unlock:
      return "spinlock lock+unlock";
    case op_primitive::list_pop_push:
      return "list pop+push";
    case op_primitive::buffer_push_pop:
      return "buffer push+pop";
    case op_primitive::memcpy16:
      return "memcpy buffer push+pop, 16 B";
    case op_primitive::memcpy64:
      return "memcpy buffer push+pop, 64 B";
    case op_primitive::pool_alloc_free:
      return "pool alloc+free, 8 B";
  }
  return "?";
}

const char* who_name(op_who w) {
  switch (w) {
    case op_who::percpu:
      return "percpu";
    case op_who::c_api:
      return "C API";
    case op_who::minimal:
      return "minimal";
    case op_who::baseline:
      return "atomic";
    case op_who::librseq:
      return "librseq";
  }
  return "?";
}

const char* shape_name(op_shape s) {
  return s == op_shape::call ? "call" : "inline";
}

std::string bench_name(const op_contender& c) {
  return fmt::format("{}/{}/{}/{}", primitive_name(c.primitive), to_string(c.mode),
                     shape_name(c.shape), who_name(c.who));
}

// ---- percpu's contenders -------------------------------------------------------------------

struct record16 {
  std::intptr_t word[2];
};
struct record64 {
  std::intptr_t word[8];
};

// The getcpu rows call a function of their own, aligned as call_op is, in every column
// (the call shape); the inline shape reads the index in the loop.
[[gnu::noinline, gnu::aligned(64)]] int percpu_cpu() {
  return current_cpu();
}
[[gnu::noinline, gnu::aligned(64)]] int percpu_mm_cid() {
  return current_mm_cid();
}

// The structures of one index mode, built once for the whole run.
template <index_mode M>
struct percpu_side {
  static inline counter<std::intptr_t, M>* count;
  static inline spinlock<M>* lock;
  static inline freelist<op_list_item, &op_list_item::next, M, false>* list;
  static inline std::vector<op_list_item>* items;
  static inline buffer<int*, M, false>* ptrs;
  static inline memcpy_buffer<record16, M>* records16;
  static inline memcpy_buffer<record64, M>* records64;
  static inline pool<M>* objects;

  static void read_index() { keep(current_index<M>()); }
  static void add_one() { count->add(1); }
  // Through the guard, the way scoped code takes the lock (unlock(index)'s checks are for a
  // caller that passes an index around).
  static void lock_unlock() { typename spinlock<M>::guard held(*lock); }
  static void pop_push() {
    if (op_list_item* it = list->pop()) list->push(it);
  }
  static void buffer_push_pop() {
    static int dummy;
    if (ptrs->push(&dummy)) ptrs->pop();
  }
  template <class R, memcpy_buffer<R, M>** B>
  static void memcpy_push_pop() {
    R record{{1}};
    if ((*B)->push(record)) (*B)->pop(record);
  }
  static void alloc_free() {
    percpu_ptr<std::intptr_t, M> p = objects->template allocate<std::intptr_t>();
    objects->free(p);
  }

  // Before each run: empties every index's list (a run's threads may have left items on any
  // index) and returns every item to the spares. A freelist takes pushes only on the index the
  // caller runs on, so every list a thread uses is given kPrefill items, as the other
  // contenders' lists are, in the way each mode allows: in cpu_id mode this thread runs on each
  // allowed CPU in turn and fills its list; in mm_cid mode, which no affinity selects, each
  // thread of the run fills its own list before its loop (list_loop()). (Filling every list
  // from this thread put every item on its own CPU's list: a thread on another CPU then found
  // its list empty and measured misses.)
  static void refill_lists() {
    for (int i = 0; i < list->slots(); ++i) list->drain(i);
    std::lock_guard<std::mutex> hold(spare_lock);
    spare.clear();
    for (op_list_item& it : *items) spare.push_back(&it);
    if constexpr (M == index_mode::cpu_id) on_each_allowed_cpu([](int) { prime_own_list(); });
  }
  // Pushes up to kPrefill spares onto the calling thread's list; the caller holds spare_lock.
  static void prime_own_list() {
    for (int k = 0; k < kPrefill && !spare.empty(); ++k) {
      list->push(spare.back());
      spare.pop_back();
    }
  }
  template <auto Op, op_shape S>
  struct list_loop {
    static std::uint64_t loop(int thread, const std::atomic<bool>& stop) {
      if constexpr (M == index_mode::mm_cid) {
        std::lock_guard<std::mutex> hold(spare_lock);
        prime_own_list();
      }
      return shaped_loop<Op, S>(thread, stop);
    }
  };
  static inline std::vector<op_list_item*> spare;
  static inline std::mutex spare_lock;

  static void build(int slots) {
    count = new counter<std::intptr_t, M>();
    lock = new spinlock<M>();
    list = new freelist<op_list_item, &op_list_item::next, M, false>();
    items = new std::vector<op_list_item>(static_cast<std::size_t>(slots) * kPrefill);
    ptrs = new buffer<int*, M, false>(kBufferCapacity);
    records16 = new memcpy_buffer<record16, M>(kBufferCapacity);
    records64 = new memcpy_buffer<record64, M>(kBufferCapacity);
    objects = new pool<M>();
  }

  static void add_rows(std::vector<op_contender>& out) {
    const op_who w = op_who::percpu;
    constexpr op_primitive read =
        M == index_mode::cpu_id ? op_primitive::current_cpu : op_primitive::current_mm_cid;
    // The call shape of the index read calls a function that returns it (below); the inline
    // shape reads it in the loop.
    out.push_back(
        {read, M, w, op_loop < M == index_mode::cpu_id ? percpu_cpu : percpu_mm_cid >, {}});
    out.push_back({read, M, w, inline_loop<read_index>, {}, op_shape::inlined});
    add_shapes<add_one, plain>(out, op_primitive::counter_add, M, w);
    add_shapes<lock_unlock, plain>(out, op_primitive::lock_unlock, M, w);
    add_shapes<pop_push, list_loop>(out, op_primitive::list_pop_push, M, w, refill_lists);
    add_shapes<buffer_push_pop, plain>(out, op_primitive::buffer_push_pop, M, w);
    add_shapes<memcpy_push_pop<record16, &records16>, plain>(out, op_primitive::memcpy16, M, w);
    add_shapes<memcpy_push_pop<record64, &records64>, plain>(out, op_primitive::memcpy64, M, w);
    add_shapes<alloc_free, plain>(out, op_primitive::pool_alloc_free, M, w);
  }
};

// ---- the atomic baseline: the same per-CPU slots, updated with atomic instructions -------

template <index_mode M>
struct atomic_side {
  static inline op_memory* memory;

  static inline char* base;

  static std::intptr_t* words() { return op_memory::region_of(base, current_index<M>()); }
  // A per-index lock taken with an atomic exchange (word 1), around each pop, push and copy.
  static void lock(std::intptr_t* r) {
    while (__atomic_exchange_n(&r[1], 1, __ATOMIC_ACQUIRE) != 0) PERCPU_CPU_RELAX();
  }
  static void unlock(std::intptr_t* r) { __atomic_store_n(&r[1], 0, __ATOMIC_RELEASE); }

  static void add_one() { __atomic_fetch_add(&words()[0], 1, __ATOMIC_RELAXED); }
  static void lock_unlock() {
    std::intptr_t* r = words();
    std::intptr_t free = 0;
    while (
        !__atomic_compare_exchange_n(&r[0], &free, 1, false, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) {
      free = 0;
      PERCPU_CPU_RELAX();
    }
    __atomic_store_n(&r[0], 0, __ATOMIC_RELEASE);
  }
  static void pop_push() {
    std::intptr_t* r = words();
    lock(r);
    auto* it = reinterpret_cast<op_list_item*>(r[0]);
    if (it) r[0] = reinterpret_cast<std::intptr_t>(it->next);
    unlock(r);
    if (!it) return;
    r = words();
    lock(r);
    it->next = reinterpret_cast<op_list_item*>(r[0]);
    r[0] = reinterpret_cast<std::intptr_t>(it);
    unlock(r);
  }
  template <std::size_t Words>
  static void push_pop() {
    std::intptr_t record[Words] = {1};
    std::intptr_t* r = words();
    lock(r);
    const bool pushed = r[0] < kBufferCapacity;
    if (pushed) std::copy_n(record, Words, &r[8 + r[0]++ * Words]);
    unlock(r);
    if (!pushed) return;
    r = words();
    lock(r);
    if (r[0] > 0) std::copy_n(&r[8 + --r[0] * Words], Words, record);
    unlock(r);
  }
  static void reset() { memory->clear(); }
  static void refill_lists() { memory->refill_lists(); }
  static void build(int slots) {
    memory = new op_memory(slots);
    base = memory->base();
  }

  static void add_rows(std::vector<op_contender>& out) {
    const op_who w = op_who::baseline;
    add_shapes<add_one, plain>(out, op_primitive::counter_add, M, w, reset);
    add_shapes<lock_unlock, plain>(out, op_primitive::lock_unlock, M, w, reset);
    add_shapes<pop_push, plain>(out, op_primitive::list_pop_push, M, w, refill_lists);
    add_shapes<push_pop<1>, plain>(out, op_primitive::buffer_push_pop, M, w, reset);
    add_shapes<push_pop<2>, plain>(out, op_primitive::memcpy16, M, w, reset);
    add_shapes<push_pop<8>, plain>(out, op_primitive::memcpy64, M, w, reset);
  }
};

[[gnu::noinline, gnu::aligned(64)]] int glibc_sched_getcpu() {
  return sched_getcpu();
}
void glibc_read_cpu() {
  keep(sched_getcpu());
}

std::vector<op_contender> percpu_and_atomic_contenders(int slots) {
  std::vector<op_contender> out;
  percpu_side<index_mode::cpu_id>::build(slots);
  percpu_side<index_mode::mm_cid>::build(index_space<index_mode::mm_cid>());
  atomic_side<index_mode::cpu_id>::build(slots);
  atomic_side<index_mode::mm_cid>::build(index_space<index_mode::mm_cid>());
  out.push_back({op_primitive::current_cpu,
                 index_mode::cpu_id,
                 op_who::baseline,
                 op_loop<glibc_sched_getcpu>,
                 {}});
  out.push_back({op_primitive::current_cpu,
                 index_mode::cpu_id,
                 op_who::baseline,
                 inline_loop<glibc_read_cpu>,
                 {},
                 op_shape::inlined});
  percpu_side<index_mode::cpu_id>::add_rows(out);
  percpu_side<index_mode::mm_cid>::add_rows(out);
  atomic_side<index_mode::cpu_id>::add_rows(out);
  atomic_side<index_mode::mm_cid>::add_rows(out);
  return out;
}

// ---- the C API: C loops over <percpu.h> (ops_c.c) -----------------------------------------

template <std::uint64_t (*Loop)(const void*)>
std::uint64_t c_loop(int, const std::atomic<bool>& stop) {
  return Loop(&stop);
}
template <std::uint64_t (*Loop)(const void*, int), int MmCid>
std::uint64_t c_add_loop(int, const std::atomic<bool>& stop) {
  return Loop(&stop, MmCid);
}

}  // namespace

std::vector<op_contender> c_api_contenders() {
  static_assert(sizeof(std::atomic<bool>) == 1, "the C loops read the stop flag as one byte");
  if (percpu_bench_c_setup() != 0) return {};
  const op_who w = op_who::c_api;
  constexpr index_mode cpu = index_mode::cpu_id, cid = index_mode::mm_cid;
  constexpr op_shape inl = op_shape::inlined;
  return {
      {op_primitive::current_cpu, cpu, w, c_loop<percpu_bench_c_cpu_call>, {}},
      {op_primitive::current_cpu, cpu, w, c_loop<percpu_bench_c_cpu_inline>, {}, inl},
      {op_primitive::current_mm_cid, cid, w, c_loop<percpu_bench_c_mm_cid_call>, {}},
      {op_primitive::current_mm_cid, cid, w, c_loop<percpu_bench_c_mm_cid_inline>, {}, inl},
      {op_primitive::counter_add, cpu, w, c_add_loop<percpu_bench_c_add_call, 0>, {}},
      {op_primitive::counter_add, cpu, w, c_add_loop<percpu_bench_c_add_inline, 0>, {}, inl},
      {op_primitive::counter_add, cid, w, c_add_loop<percpu_bench_c_add_call, 1>, {}},
      {op_primitive::counter_add, cid, w, c_add_loop<percpu_bench_c_add_inline, 1>, {}, inl},
  };
}

namespace {

// ---- the table -----------------------------------------------------------------------------

constexpr std::array<op_who, 4> kColumns = {op_who::percpu, op_who::minimal, op_who::librseq,
                                            op_who::baseline};
constexpr std::array<op_primitive, 9> kRows = {
    op_primitive::current_cpu, op_primitive::current_mm_cid, op_primitive::counter_add,
    op_primitive::lock_unlock, op_primitive::list_pop_push,  op_primitive::buffer_push_pop,
    op_primitive::memcpy16,    op_primitive::memcpy64,       op_primitive::pool_alloc_free};

const bench_result* find(const std::vector<bench_result>& results, op_primitive p, index_mode m,
                         op_shape shape, op_who w, int threads) {
  op_contender key{p, m, w, {}, {}, shape};
  return find_result(results, bench_name(key), threads);
}

std::string cell(const bench_result* r) {
  return r ? fmt::format("{:.2f}{}", r->median_ns, r->noisy() ? "~" : "") : "-";
}

// percpu's time over the other's, as the median of the rounds' ratios: both ran in the same
// round, back to back, so a round that the machine slowed shows in both and cancels.
std::optional<double> round_ratio(const bench_result* ours, const bench_result* other) {
  if (!ours || !other || ours->samples_ns.size() != other->samples_ns.size() ||
      ours->samples_ns.empty())
    return std::nullopt;
  std::vector<double> r;
  for (std::size_t k = 0; k < ours->samples_ns.size(); ++k)
    if (other->samples_ns[k] > 0) r.push_back(ours->samples_ns[k] / other->samples_ns[k]);
  if (r.empty()) return std::nullopt;
  return median(std::move(r));
}

std::string ratio(const bench_result* ours, const bench_result* other) {
  const auto r = round_ratio(ours, other);
  return r ? fmt::format("{:.2f}x", *r) : "-";
}

void print_table(const std::vector<bench_result>& results, int threads, op_shape shape) {
  fmt::print("{} thread{}, {}\n", threads, threads == 1 ? "" : "s",
             shape == op_shape::call ? "through a call (a function of its own per operation)"
                                     : "inlined in the caller's loop");
  fmt::print("{:<34} {:<7} {:>8} {:>8} {:>8} {:>8} {:>8} {:>9} {:>9} {:>7} {:>7}\n", "primitive",
             "mode", "percpu", "C API", "minimal", "librseq", "atomic", "/minimal", "/librseq",
             "C/C++", "spread");
  bool noisy = false;
  for (index_mode m : {index_mode::cpu_id, index_mode::mm_cid}) {
    for (op_primitive p : kRows) {
      const bench_result* ours = find(results, p, m, shape, op_who::percpu, threads);
      if (!ours) continue;
      const bench_result* minimal = find(results, p, m, shape, op_who::minimal, threads);
      const bench_result* lib = find(results, p, m, shape, op_who::librseq, threads);
      const bench_result* base = find(results, p, m, shape, op_who::baseline, threads);
      const bench_result* c = find(results, p, m, shape, op_who::c_api, threads);
      for (const bench_result* r : {ours, c, minimal, lib, base})
        noisy = noisy || (r && r->noisy());
      fmt::print("{:<34} {:<7} {:>8} {:>8} {:>8} {:>8} {:>8} {:>9} {:>9} {:>7} {:>6}%\n",
                 primitive_name(p), to_string(m), cell(ours), cell(c), cell(minimal), cell(lib),
                 cell(base), ratio(ours, minimal), ratio(ours, lib), ratio(c, ours),
                 ours->spread_percent());
    }
  }
  if (noisy) fmt::print("~ marks results whose rounds varied by more than 20%\n");
  fmt::print("\n");
}

// The worst ratio of percpu to `other` over the rows of one shape at `threads`, with its row.
struct worst_ratio {
  double value = 0;
  std::string row;
};
worst_ratio worst(const std::vector<bench_result>& results, op_who other, op_shape shape,
                  int threads) {
  worst_ratio w;
  for (index_mode m : {index_mode::cpu_id, index_mode::mm_cid})
    for (op_primitive p : kRows) {
      const bench_result* ours = find(results, p, m, shape, op_who::percpu, threads);
      const bench_result* theirs = find(results, p, m, shape, other, threads);
      const auto r = round_ratio(ours, theirs);
      if (r && *r > w.value) w = {*r, fmt::format("{} ({})", primitive_name(p), to_string(m))};
    }
  return w;
}

// Resident bytes per object of percpu's pool, measured as librseq_pool_bytes_per_object().
std::optional<double> percpu_pool_bytes_per_object() {
  pool<index_mode::cpu_id> objects;
  std::vector<percpu_ptr<std::intptr_t, index_mode::cpu_id>> held(kMemoryObjects);
  const std::size_t before = resident_bytes_now();
  for (int k = 0; k < kMemoryObjects; ++k) {
    auto& p = held[static_cast<std::size_t>(k)];
    p = objects.allocate<std::intptr_t>();
    for (int i = 0; i < p.slots(); ++i) p[i] = k;
  }
  const std::size_t after = resident_bytes_now();
  for (auto& p : held) objects.free(p);
  if (before == 0 || after < before) return std::nullopt;
  return static_cast<double>(after - before) / kMemoryObjects;
}

}  // namespace

std::size_t resident_bytes_now() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return 0;
  unsigned long size = 0, resident = 0;
  const bool ok = std::fscanf(f, "%lu %lu", &size, &resident) == 2;
  std::fclose(f);
  return ok ? resident * static_cast<std::size_t>(sysconf(_SC_PAGESIZE)) : 0;
}

int bench_ops(const bench_options& options) {
  if (!can_write(options.json_out)) return 1;
  const registration_info reg = registration();
  const int slots = index_space<index_mode::cpu_id>();
  const int cpus = static_cast<int>(machine_topology().allowed_cpus.size());
  std::vector<op_contender> contenders = percpu_and_atomic_contenders(slots);
  std::string minimal_missing, librseq_missing;
  for (auto& c : minimal_contenders(slots, minimal_missing)) contenders.push_back(std::move(c));
  for (auto& c : librseq_contenders(slots, librseq_missing)) contenders.push_back(std::move(c));
  for (auto& c : c_api_contenders()) contenders.push_back(std::move(c));

  // Rounds alternate the contenders: each registers once per round, as its own benchmark of one
  // repetition; the runner gathers the rounds' samples under one name. Within a round the
  // contenders of one row run back to back, so the ratios of a row compare runs a few tens of
  // milliseconds apart; on a shared machine, many short rounds give steadier medians than a few
  // long ones.
  std::stable_sort(
      contenders.begin(), contenders.end(), [](const op_contender& a, const op_contender& b) {
        return std::tuple(a.mode, a.primitive, a.shape) < std::tuple(b.mode, b.primitive, b.shape);
      });
  const bench_plan plan = make_plan(options, {15, 0.04}, {5, 0.02});
  std::vector<int> thread_counts = {1};
  if (cpus > 1) thread_counts.push_back(cpus);
  for (int round = 0; round < plan.repetitions; ++round)
    for (int threads : thread_counts)
      for (const op_contender& c : contenders)
        register_throughput(bench_name(c), threads, {1, plan.min_time_s}, c.body, c.before_run,
                            /*cpu_time=*/true);
  const auto results = run_registered("ops");

  fmt::print(
      "percpu bench ops: CPU ns per operation (the threads' CPU time over their operations), "
      "median of {}, each running every contender once (mode: {}, area: {}, {})\n"
      "  minimal: a hand-written rseq sequence, the shortest that does the operation{}\n"
      "  librseq: {}\n"
      "  C API: the same operation from C through <percpu.h> (the getcpu cache and, on x86-64, "
      "the counter add inline; elsewhere the add is a call); C/C++: its time over percpu's C++\n"
      "  atomic: atomic instructions on the same per-CPU slots (current_cpu: glibc's "
      "sched_getcpu)\n"
      "  /minimal, /librseq: percpu's time over theirs, the median of the rounds' ratios; "
      "spread: (max - min) / median of percpu's rounds\n\n",
      plan.repetitions == 1 ? std::string("1 round") : fmt::format("{} rounds", plan.repetitions),
      reg.fallback ? "fallback" : "rseq", to_string(reg.owner),
      cpus == 1 ? std::string("1 CPU") : fmt::format("{} CPUs", cpus),
      minimal_missing.empty() ? "" : " (" + minimal_missing + ")",
      librseq_missing.empty() ? "its operations, as its own tests write them" : librseq_missing);
  for (int threads : thread_counts)
    for (op_shape shape : {op_shape::call, op_shape::inlined}) print_table(results, threads, shape);
  for (op_shape shape : {op_shape::call, op_shape::inlined})
    for (op_who other : {op_who::minimal, op_who::librseq}) {
      const worst_ratio w = worst(results, other, shape, 1);
      if (w.value > 0)
        fmt::print("at 1 thread, {}, percpu takes at most {:.2f}x {}'s time ({})\n",
                   shape == op_shape::call ? "through a call" : "inlined", w.value, who_name(other),
                   w.row);
    }
  // Memory per object: after the timed rounds, so their pools' memory is already resident.
  // -1: not measured.
  const double ours = percpu_pool_bytes_per_object().value_or(-1);
  const double theirs =
      librseq_missing.empty() ? librseq_pool_bytes_per_object(slots).value_or(-1) : -1;
  auto bytes = [](double b) { return b >= 0 ? fmt::format("{:.1f} B", b) : std::string("-"); };
  fmt::print(
      "pool memory per 8-byte object ({} objects, every slot of each written, the process's "
      "resident growth): percpu {}, librseq {}{}\n",
      kMemoryObjects, bytes(ours), bytes(theirs),
      ours >= 0 && theirs > 0 ? fmt::format(" ({:.2f}x)", ours / theirs) : "");
  std::fflush(stdout);

  if (!options.json_out.empty()) {
    nlohmann::json extra;
    extra["mode"] = reg.fallback ? "fallback" : "rseq";
    extra["area"] = to_string(reg.owner);
    extra["minimal_missing"] = minimal_missing;
    extra["librseq_missing"] = librseq_missing;
    if (ours >= 0) extra["pool_bytes_per_object"]["percpu"] = ours;
    if (theirs >= 0) extra["pool_bytes_per_object"]["librseq"] = theirs;
    nlohmann::json labels = nlohmann::json::object();
    for (const op_contender& c : contenders) labels[bench_name(c)] = who_name(c.who);
    extra["labels"] = labels;
    if (!write_json(options.json_out, "ops", results, extra)) return 1;
  }
  return 0;
}

}  // namespace percpu::cli
