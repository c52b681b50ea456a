// `percpu bench list`: a free list shared by 1 to 256 threads, each iteration pushing the item it
// holds and popping one (the pattern of a slab allocator's free list). percpu's per-CPU free list
// against a mutex-protected list and a lock-free Treiber stack with an ABA tag.
#include <fmt/core.h>

#include <percpu/percpu.h>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <vector>

#include "bench/runner.h"
#include "commands.h"

namespace percpu::cli {
namespace {

const std::vector<int> kThreadCounts = {1, 2, 4, 8, 64, 256};
constexpr int kMaxThreads = 256;
// Items each benchmark thread owns at the start; it takes a spare when a pop finds its CPU's
// list empty (it migrated between its push and its pop).
constexpr int kItemsPerThread = 64;

struct item {
  item* next = nullptr;
  std::uint32_t index = 0;  // position in g_items, for the Treiber stack's tagged head
};
std::unique_ptr<item[]> g_items;

item* first_item_of(int thread) {
  return &g_items[static_cast<std::size_t>(thread) * kItemsPerThread];
}

// ---- per-CPU free lists ----
freelist<item, &item::next, index_mode::cpu_id, false>* g_percpu_cpu;
freelist<item, &item::next, index_mode::mm_cid, false>* g_percpu_cid;

void reset_all();

template <class List>
std::uint64_t run_percpu(int thread, const std::atomic<bool>& stop, List& list) {
  item* spare = first_item_of(thread);
  int spares_left = kItemsPerThread - 1;
  item* held = spare++;
  return run_until(stop, [&] {
    list.push(held);
    held = list.pop();
    if (held == nullptr) {  // migrated between push and pop: the item stays on the old CPU
      if (spares_left == 0) std::abort();  // 63 migrations inside one push+pop: impossible
      held = spare++;
      --spares_left;
    }
  });
}
std::uint64_t percpu_cpu_id(int thread, const std::atomic<bool>& stop) {
  return run_percpu(thread, stop, *g_percpu_cpu);
}
std::uint64_t percpu_mm_cid(int thread, const std::atomic<bool>& stop) {
  return run_percpu(thread, stop, *g_percpu_cid);
}

// ---- one list under a mutex ----
struct locked_list {
  std::mutex lock;
  item* head = nullptr;
};
locked_list g_locked;

// ---- a Treiber stack: head = (tag << 32) | (index + 1), so a pop/push in between (ABA) changes
// the word even when the same item is on top again ----
alignas(64) std::atomic<std::uint64_t> g_treiber{0};

void treiber_push(item* p) {
  std::uint64_t head = g_treiber.load(std::memory_order_relaxed);
  for (;;) {
    const std::uint32_t top = static_cast<std::uint32_t>(head);
    p->next = top ? &g_items[top - 1] : nullptr;
    const std::uint64_t next = ((head >> 32) + 1) << 32 | (p->index + 1);
    if (g_treiber.compare_exchange_weak(head, next, std::memory_order_release,
                                        std::memory_order_relaxed))
      return;
  }
}
item* treiber_pop() {
  std::uint64_t head = g_treiber.load(std::memory_order_acquire);
  for (;;) {
    const std::uint32_t top = static_cast<std::uint32_t>(head);
    if (top == 0) return nullptr;
    item* p = &g_items[top - 1];
    const item* after = p->next;  // may be stale; the tag makes the CAS fail then
    const std::uint64_t next = ((head >> 32) + 1) << 32 | (after ? after->index + 1 : 0);
    if (g_treiber.compare_exchange_weak(head, next, std::memory_order_acquire,
                                        std::memory_order_acquire))
      return p;
  }
}
std::uint64_t treiber(int thread, const std::atomic<bool>& stop) {
  item* held = first_item_of(thread);
  return run_until(stop, [&] {
    treiber_push(held);
    held = treiber_pop();  // never empty: this thread just pushed
  });
}

// Every run starts with all items free and each thread holding its own (before_run).
void reset_all() {
  for (int i = 0; i < g_percpu_cpu->slots(); ++i) g_percpu_cpu->drain(i);
  for (int i = 0; i < g_percpu_cid->slots(); ++i) g_percpu_cid->drain(i);
  g_treiber.store(0);
  g_locked.head = nullptr;
}

// A push and a pop, each under the lock, as a shared free list does.
std::uint64_t mutex_list(int thread, const std::atomic<bool>& stop) {
  item* held = first_item_of(thread);
  return run_until(stop, [&] {
    {
      std::lock_guard<std::mutex> l(g_locked.lock);
      held->next = g_locked.head;
      g_locked.head = held;
    }
    std::lock_guard<std::mutex> l(g_locked.lock);
    held = g_locked.head;
    g_locked.head = held->next;
  });
}

const std::vector<contender> kContenders = {
    {"percpu freelist (cpu_id)", "percpu cpu_id", percpu_cpu_id},
    {"percpu freelist (mm_cid)", "percpu mm_cid", percpu_mm_cid},
    {"Treiber stack (tagged CAS)", "Treiber", treiber},
    {"list + mutex", "list+mutex", mutex_list},
};

}  // namespace

int bench_list(const bench_options& options) {
  if (!can_write(options.json_out)) return 1;
  const registration_info reg = registration();
  g_items = std::make_unique<item[]>(static_cast<std::size_t>(kMaxThreads) * kItemsPerThread);
  for (std::uint32_t i = 0; i < kMaxThreads * kItemsPerThread; ++i) g_items[i].index = i;
  freelist<item, &item::next, index_mode::cpu_id, false> percpu_cpu;
  freelist<item, &item::next, index_mode::mm_cid, false> percpu_cid;
  g_percpu_cpu = &percpu_cpu;
  g_percpu_cid = &percpu_cid;
  const bench_plan plan = make_plan(options, {7, 0.2}, {3, 0.05});

  register_contenders(kContenders, kThreadCounts, plan, reset_all);
  const auto results = run_registered("list");

  fmt::print(
      "percpu bench list: wall-clock ns per push+pop pair of the whole process, median of {} "
      "repetitions (mode: {}, {} CPUs); ratios: the other's time / percpu cpu_id's\n\n",
      plan.repetitions, reg.fallback ? "fallback" : "rseq", machine_topology().allowed_cpus.size());
  std::fflush(stdout);
  print_thread_table(results, kThreadCounts, kContenders, kContenders[0].name,
                     {{"Treiber stack (tagged CAS)", "Treiber/"}, {"list + mutex", "list+mutex/"}});

  if (!options.json_out.empty()) {
    nlohmann::json extra;
    extra["mode"] = reg.fallback ? "fallback" : "rseq";
    extra["labels"] = contender_labels(kContenders);
    if (!write_json(options.json_out, "list", results, extra)) return 1;
  }
  return 0;
}

}  // namespace percpu::cli
