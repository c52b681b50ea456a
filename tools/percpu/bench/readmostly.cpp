// `percpu bench readmostly`: the read-mostly primitives against what programs use instead.
// Three parts, each at 1, 2, 4, ... up to 4x the CPUs, all threads on one object:
//   read:  a read lock + unlock of one reader-writer lock (percpu_rwsem, pthread_rwlock_t,
//          std::shared_mutex, tbb::spin_rw_mutex, absl::Mutex in reader mode; liburcu's
//          urcu-memb read-side critical section, the limit for readers; one percpu::counter add
//          as the unit the target is stated in);
//   ref:   a get + put of one reference count (percpu_ref, one std::atomic, a std::shared_ptr
//          copied and dropped);
//   mix:   99% reads of an 8-word record, 1% writes of it: throughput, and each writer's time
//          from asking for the lock to releasing it (median and 99th percentile).
// ns per operation of the whole process, medians of repetitions, ratios side by side.
#include <fmt/core.h>
#include <pthread.h>

#include <percpu/percpu.h>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <thread>
#include <vector>

#ifdef PERCPU_HAVE_TBB
#include <oneapi/tbb/spin_rw_mutex.h>
#endif
#ifdef PERCPU_HAVE_ABSL
#include <absl/synchronization/mutex.h>
#endif
#ifdef PERCPU_HAVE_URCU
#define _LGPL_SOURCE  // liburcu's inline read side: what its users compile
#include <urcu/urcu-memb.h>
#endif

#include "bench/runner.h"
#include "commands.h"

namespace percpu::cli {
namespace {

// The objects every thread shares.
percpu_rwsem<index_mode::cpu_id>* g_rwsem_cpu;
percpu_rwsem<index_mode::mm_cid>* g_rwsem_cid;
percpu_ref<index_mode::cpu_id>* g_ref_cpu;
percpu_ref<index_mode::mm_cid>* g_ref_cid;
counter<std::int64_t, index_mode::cpu_id>* g_counter;
pthread_rwlock_t g_pthread = PTHREAD_RWLOCK_INITIALIZER;
std::shared_mutex* g_shared_mutex;
#ifdef PERCPU_HAVE_TBB
tbb::spin_rw_mutex* g_tbb;
#endif
#ifdef PERCPU_HAVE_ABSL
absl::Mutex* g_absl;
#endif
alignas(64) std::atomic<std::int64_t> g_atomic_ref{1};
std::shared_ptr<int>* g_shared_ptr;

// Each lock as four static functions, inlined into the benchmark bodies (as a caller inlines
// the lock it uses). A lock meeting SharedMutex, reached through the global pointer P:
template <class Lock, Lock** P>
struct shared_mutex_ops {
  PERCPU_ALWAYS_INLINE static void rlock() { (*P)->lock_shared(); }
  PERCPU_ALWAYS_INLINE static void runlock() { (*P)->unlock_shared(); }
  PERCPU_ALWAYS_INLINE static void wlock() { (*P)->lock(); }
  PERCPU_ALWAYS_INLINE static void wunlock() { (*P)->unlock(); }
};
using rwsem_cpu = shared_mutex_ops<percpu_rwsem<index_mode::cpu_id>, &g_rwsem_cpu>;
using rwsem_cid = shared_mutex_ops<percpu_rwsem<index_mode::mm_cid>, &g_rwsem_cid>;
struct pthread_rw {
  PERCPU_ALWAYS_INLINE static void rlock() { pthread_rwlock_rdlock(&g_pthread); }
  PERCPU_ALWAYS_INLINE static void runlock() { pthread_rwlock_unlock(&g_pthread); }
  PERCPU_ALWAYS_INLINE static void wlock() { pthread_rwlock_wrlock(&g_pthread); }
  PERCPU_ALWAYS_INLINE static void wunlock() { pthread_rwlock_unlock(&g_pthread); }
};
using std_shared = shared_mutex_ops<std::shared_mutex, &g_shared_mutex>;
#ifdef PERCPU_HAVE_TBB
using tbb_rw = shared_mutex_ops<tbb::spin_rw_mutex, &g_tbb>;
#endif
#ifdef PERCPU_HAVE_ABSL
struct absl_rw {
  PERCPU_ALWAYS_INLINE static void rlock() { g_absl->ReaderLock(); }
  PERCPU_ALWAYS_INLINE static void runlock() { g_absl->ReaderUnlock(); }
  PERCPU_ALWAYS_INLINE static void wlock() { g_absl->Lock(); }
  PERCPU_ALWAYS_INLINE static void wunlock() { g_absl->Unlock(); }
};
#endif

template <class L>
std::uint64_t read_body(int, const std::atomic<bool>& stop) {
  return run_until(stop, [] {
    L::rlock();
    L::runlock();
  });
}
std::uint64_t counter_body(int, const std::atomic<bool>& stop) {
  return run_until(stop, [] { g_counter->add(1); });
}
#ifdef PERCPU_HAVE_URCU
// A thread of liburcu's urcu-memb flavour registers before its first read-side section.
struct urcu_thread {
  urcu_thread() { urcu_memb_register_thread(); }
  ~urcu_thread() { urcu_memb_unregister_thread(); }
};
std::uint64_t urcu_read_body(int, const std::atomic<bool>& stop) {
  urcu_thread registered;
  return run_until(stop, [] {
    urcu_memb_read_lock();
    urcu_memb_read_unlock();
  });
}
#endif

std::uint64_t ref_cpu_body(int, const std::atomic<bool>& stop) {
  return run_until(stop, [] {
    g_ref_cpu->get();
    g_ref_cpu->put();
  });
}
std::uint64_t ref_cid_body(int, const std::atomic<bool>& stop) {
  return run_until(stop, [] {
    g_ref_cid->get();
    g_ref_cid->put();
  });
}
std::uint64_t atomic_ref_body(int, const std::atomic<bool>& stop) {
  return run_until(stop, [] {
    g_atomic_ref.fetch_add(1, std::memory_order_relaxed);
    if (g_atomic_ref.fetch_sub(1, std::memory_order_acq_rel) == 1) std::abort();  // never zero
  });
}
std::uint64_t shared_ptr_body(int, const std::atomic<bool>& stop) {
  return run_until(stop, [] {
    std::shared_ptr<int> copy = *g_shared_ptr;
    benchmark::DoNotOptimize(copy);
  });
}

// ---- mix: 99% reads, 1% writes of one record ----

constexpr int kRecordWords = 8;
constexpr int kWriteEvery = 100;
struct record {
  std::uint64_t words[kRecordWords] = {};
};
record g_record;  // the lock-protected record

// Writers' times (ns from asking for the write lock to releasing it), per contender.
std::mutex g_latency_lock;
std::map<std::string, std::vector<double>> g_latency;

void keep_latencies(const char* name, const std::vector<double>& mine) {
  std::lock_guard<std::mutex> l(g_latency_lock);
  auto& all = g_latency[name];
  all.insert(all.end(), mine.begin(), mine.end());
}

std::uint64_t read_record(const record& r) {
  std::uint64_t sum = 0;
  for (const auto w : r.words) sum += w;
  return sum;
}

// One thread of the mix: 99 reads, then a write, over and over (threads start at different
// points of the cycle, so writes do not come in lockstep); each write timed from its start to
// its end. `read()` returns what it read; `write()` changes the record.
template <class Read, class Write>
std::uint64_t mix_loop(const char* name, int thread, const std::atomic<bool>& stop, Read read,
                       Write write) {
  std::vector<double> latencies;
  std::uint64_t done = 0, sink = 0;
  long i = thread * 37;
  while (!stop.load(std::memory_order_relaxed)) {
    for (int k = 0; k < 256; ++k, ++i) {
      if (i % kWriteEvery == 0) {
        const auto t0 = std::chrono::steady_clock::now();
        write();
        latencies.push_back(
            std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0)
                .count());
      } else {
        sink += read();
      }
    }
    done += 256;
  }
  benchmark::DoNotOptimize(sink);
  keep_latencies(name, latencies);
  return done;
}

// The mix with lock L around the shared record.
template <class L>
std::uint64_t mix_body_for(const char* name, int thread, const std::atomic<bool>& stop) {
  return mix_loop(
      name, thread, stop,
      [] {
        L::rlock();
        const std::uint64_t v = read_record(g_record);
        L::runlock();
        return v;
      },
      [] {
        L::wlock();
        for (auto& w : g_record.words) ++w;
        L::wunlock();
      });
}

#define PERCPU_MIX(L, NAME)                                        \
  [](int thread, const std::atomic<bool>& stop) -> std::uint64_t { \
    return mix_body_for<L>(NAME, thread, stop);                    \
  }

#ifdef PERCPU_HAVE_URCU
// liburcu: readers read the current copy; a writer copies it, changes the copy, publishes it
// and waits for a grace period before freeing the old one (writers take a mutex).
std::atomic<record*> g_rcu_record;
std::mutex g_rcu_writer;
std::uint64_t urcu_mix_body(int thread, const std::atomic<bool>& stop) {
  urcu_thread registered;
  return mix_loop(
      "mix: liburcu (urcu-memb)", thread, stop,
      [] {
        urcu_memb_read_lock();
        const std::uint64_t v = read_record(*g_rcu_record.load(std::memory_order_consume));
        urcu_memb_read_unlock();
        return v;
      },
      [] {
        record* old;
        {
          std::lock_guard<std::mutex> l(g_rcu_writer);
          old = g_rcu_record.load(std::memory_order_relaxed);
          auto* fresh = new record(*old);
          for (auto& w : fresh->words) ++w;
          g_rcu_record.store(fresh, std::memory_order_release);
        }
        urcu_memb_synchronize_rcu();
        delete old;
      });
}
#endif

std::vector<contender> read_contenders() {
  std::vector<contender> c = {
      {"read: percpu_rwsem (cpu_id)", "rwsem cpu_id", read_body<rwsem_cpu>},
      {"read: percpu_rwsem (mm_cid)", "rwsem mm_cid", read_body<rwsem_cid>},
      {"read: pthread_rwlock_t", "pthread_rwlock", read_body<pthread_rw>},
      {"read: std::shared_mutex", "shared_mutex", read_body<std_shared>},
  };
#ifdef PERCPU_HAVE_TBB
  c.push_back({"read: tbb::spin_rw_mutex", "tbb spin_rw", read_body<tbb_rw>});
#endif
#ifdef PERCPU_HAVE_ABSL
  c.push_back({"read: absl::Mutex (reader)", "absl::Mutex", read_body<absl_rw>});
#endif
#ifdef PERCPU_HAVE_URCU
  c.push_back({"read: liburcu (urcu-memb)", "urcu-memb", urcu_read_body});
#endif
  c.push_back({"read: percpu counter add", "counter add", counter_body});
  return c;
}

std::vector<contender> ref_contenders() {
  return {
      {"ref: percpu_ref (cpu_id)", "ref cpu_id", ref_cpu_body},
      {"ref: percpu_ref (mm_cid)", "ref mm_cid", ref_cid_body},
      {"ref: one std::atomic", "std::atomic", atomic_ref_body},
      {"ref: std::shared_ptr copy", "shared_ptr", shared_ptr_body},
  };
}

std::vector<contender> mix_contenders() {
  std::vector<contender> c = {
      {"mix: percpu_rwsem (cpu_id)", "rwsem cpu_id",
       PERCPU_MIX(rwsem_cpu, "mix: percpu_rwsem (cpu_id)")},
      {"mix: percpu_rwsem (mm_cid)", "rwsem mm_cid",
       PERCPU_MIX(rwsem_cid, "mix: percpu_rwsem (mm_cid)")},
      {"mix: pthread_rwlock_t", "pthread_rwlock", PERCPU_MIX(pthread_rw, "mix: pthread_rwlock_t")},
      {"mix: std::shared_mutex", "shared_mutex", PERCPU_MIX(std_shared, "mix: std::shared_mutex")},
  };
#ifdef PERCPU_HAVE_TBB
  c.push_back(
      {"mix: tbb::spin_rw_mutex", "tbb spin_rw", PERCPU_MIX(tbb_rw, "mix: tbb::spin_rw_mutex")});
#endif
#ifdef PERCPU_HAVE_ABSL
  c.push_back({"mix: absl::Mutex (reader)", "absl::Mutex",
               PERCPU_MIX(absl_rw, "mix: absl::Mutex (reader)")});
#endif
#ifdef PERCPU_HAVE_URCU
  c.push_back({"mix: liburcu (urcu-memb)", "urcu-memb", urcu_mix_body});
#endif
  return c;
}

// A writer's fence alone (try_fence_all(): membarrier's RSEQ fence of every CPU), ns per call,
// the median of 5 batches of 500, while `busy` threads run read locks on the other CPUs (a fence
// interrupts the CPUs that run the process's threads).
double fence_ns(int busy) {
  std::atomic<bool> stop{false};
  std::vector<std::thread> readers;
  for (int t = 0; t < busy; ++t)
    readers.emplace_back([&] {
      while (!stop.load(std::memory_order_relaxed)) {
        g_rwsem_cid->lock_shared();
        g_rwsem_cid->unlock_shared();
      }
    });
  std::vector<double> batches;
  for (int b = 0; b < 5; ++b) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < 500; ++i) (void)try_fence_all();
    batches.push_back(
        std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() /
        500);
  }
  stop = true;
  for (auto& t : readers) t.join();
  std::sort(batches.begin(), batches.end());
  return batches[batches.size() / 2];
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const auto at = static_cast<std::size_t>(p * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(at, v.size() - 1)];
}

}  // namespace

int bench_readmostly(const bench_options& options) {
  if (!can_write(options.json_out)) return 1;
  const registration_info reg = registration();
  percpu_rwsem<index_mode::cpu_id> rwsem_cpu;
  percpu_rwsem<index_mode::mm_cid> rwsem_cid;
  percpu_ref<index_mode::cpu_id> ref_cpu([] {});
  percpu_ref<index_mode::mm_cid> ref_cid([] {});
  counter<std::int64_t, index_mode::cpu_id> count;
  std::shared_mutex shared_mutex;
  auto shared = std::make_shared<int>(1);
  g_rwsem_cpu = &rwsem_cpu;
  g_rwsem_cid = &rwsem_cid;
  g_ref_cpu = &ref_cpu;
  g_ref_cid = &ref_cid;
  g_counter = &count;
  g_shared_mutex = &shared_mutex;
  g_shared_ptr = &shared;
#ifdef PERCPU_HAVE_TBB
  tbb::spin_rw_mutex tbb_lock;
  g_tbb = &tbb_lock;
#endif
#ifdef PERCPU_HAVE_ABSL
  absl::Mutex absl_lock;
  g_absl = &absl_lock;
#endif
#ifdef PERCPU_HAVE_URCU
  g_rcu_record.store(new record());
#endif
  const bench_plan plan = make_plan(options, {7, 0.2}, {3, 0.05});
  // Warm up (pages, caches, the clock's speed) before the first measurement, which is ours.
  for (int i = 0; i < 20000000; ++i) {
    rwsem_cpu.lock_shared();
    rwsem_cpu.unlock_shared();
  }
  const std::vector<int> threads = cpu_scaled_thread_counts();
  const std::vector<contender> reads = read_contenders(), refs = ref_contenders(),
                               mixes = mix_contenders();
  register_contenders(reads, threads, plan);
  register_contenders(refs, threads, plan);
  register_contenders(mixes, threads, plan);
  const auto results = run_registered("readmostly");

  fmt::print(
      "percpu bench readmostly: wall-clock ns per operation of the whole process, median of {} "
      "repetitions (mode: {}, {} CPUs); ratios: the other's time / percpu cpu_id's\n\n",
      plan.repetitions, reg.fallback ? "fallback" : "rseq", machine_topology().allowed_cpus.size());
  fmt::print("read lock + unlock of one lock shared by all threads:\n");
  std::fflush(stdout);
  print_thread_table(results, threads, reads, reads[0].name,
                     {{"read: pthread_rwlock_t", "pthread/"}, {"read: std::shared_mutex", "std/"}});
  fmt::print("\nget + put of one reference count shared by all threads:\n");
  std::fflush(stdout);
  print_thread_table(
      results, threads, refs, refs[0].name,
      {{"ref: one std::atomic", "atomic/"}, {"ref: std::shared_ptr copy", "shared_ptr/"}});
  fmt::print("\nread-mostly record: 99% read lock + read 8 words, 1% write lock + write them:\n");
  std::fflush(stdout);
  print_thread_table(results, threads, mixes, mixes[0].name,
                     {{"mix: pthread_rwlock_t", "pthread/"}});

  const bench_result* r1 = find_result(results, reads[0].name, 1);
  const bench_result* c1 = find_result(results, "read: percpu counter add", 1);
  if (r1 && c1)
    fmt::print(
        "\nat 1 thread a percpu_rwsem read lock + unlock takes {:.2f}x one percpu counter "
        "add ({:.2f} vs {:.2f} ns)\n",
        r1->median_ns / c1->median_ns, r1->median_ns, c1->median_ns);
  const int cpus = static_cast<int>(machine_topology().allowed_cpus.size());
  const bench_result* rn = find_result(results, reads[0].name, cpus);
  const bench_result* pn = find_result(results, "read: pthread_rwlock_t", cpus);
  if (rn && pn)
    fmt::print("at {} threads percpu_rwsem's read throughput is {:.1f}x pthread_rwlock_t's\n", cpus,
               pn->median_ns / rn->median_ns);

  nlohmann::json latency = nlohmann::json::object();
  fmt::print(
      "\nwriter latency in the mix (ns from asking for the write lock to releasing it, all "
      "thread counts and repetitions):\n{:<30} {:>12} {:>12} {:>10}\n",
      "lock", "median", "p99", "writes");
  for (const auto& c : mixes) {
    const auto& v = g_latency[c.name];
    const double med = percentile(v, 0.5), p99 = percentile(v, 0.99);
    fmt::print("{:<30} {:>12.0f} {:>12.0f} {:>10}\n", c.label, med, p99, v.size());
    latency[c.name] = {{"median_ns", med}, {"p99_ns", p99}, {"writes", v.size()}};
  }
  const double fence_idle = fence_ns(0);
  const double fence_busy = fence_ns(std::max(1, cpus - 1));
  fmt::print(
      "percpu_rwsem's writer: a fence of every CPU when the per-CPU path is open ({:.0f} ns with "
      "the other CPUs idle, {:.0f} ns with readers running on them), then the wait for the "
      "readers inside; while writers keep coming the path stays closed and they need no fence\n",
      fence_idle, fence_busy);

  if (!options.json_out.empty()) {
    nlohmann::json extra;
    extra["mode"] = reg.fallback ? "fallback" : "rseq";
    nlohmann::json labels = contender_labels(reads);
    labels.update(contender_labels(refs));
    labels.update(contender_labels(mixes));
    extra["labels"] = labels;
    extra["threads"] = threads;
    extra["cpus"] = cpus;
    extra["writer_latency"] = latency;
    extra["fence_ns"] = {{"idle", fence_idle}, {"readers_running", fence_busy}};
    if (!write_json(options.json_out, "readmostly", results, extra)) return 1;
  }
  ref_cpu.kill();
  ref_cid.kill();
#ifdef PERCPU_HAVE_URCU
  delete g_rcu_record.exchange(nullptr);
#endif
  return 0;
}

}  // namespace percpu::cli
