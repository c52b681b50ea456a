// `percpu stress`: runs each structure with many more workers than CPUs, plus a signal storm whose
// handler uses the structure, a thread that keeps migrating the workers, a thread draining other
// indices, sched_yield in the workers, and a fork in the middle; then checks conservation.
#include "stress/harness.h"

#include "common/output_file.h"

#include <fmt/core.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <random>
#include <thread>

#include <percpu/percpu.h>
#include <nlohmann/json.hpp>

namespace percpu::cli {
namespace {

std::atomic<stress_workload*> g_workload{nullptr};

void on_signal(int) {
  const int saved = errno;
  if (stress_workload* w = g_workload.load(std::memory_order_acquire)) w->signal_op();
  errno = saved;
}

struct worker_slot {
  pthread_t thread{};
  std::atomic<pid_t> tid{0};
};

// The helper threads' shared switches.
struct run_control {
  std::atomic<bool> go{false};  // releases the workers once the helpers have started
  std::atomic<bool> stop_helpers{false};
  std::atomic<int> workers_done{0};
  std::atomic<long> progress{0};  // worker operations so far (for the fork point)

  // The first exception a thread of the run threw: the run fails with it instead of the
  // process ending in std::terminate.
  std::mutex error_mutex;
  std::string error;
  void record(const char* who, const char* what) {
    std::lock_guard<std::mutex> lock(error_mutex);
    if (error.empty()) error = fmt::format("{} threw: {}", who, what);
  }
};

// Runs `body`, recording what it throws in `ctl`; returns false when it threw.
template <class Body>
bool guarded(run_control& ctl, const char* who, Body&& body) {
  try {
    body();
    return true;
  } catch (const std::exception& e) {
    ctl.record(who, e.what());
  } catch (...) {
    ctl.record(who, "an exception of unknown type");
  }
  return false;
}

std::vector<int> allowed_cpus() {
  std::vector<int> cpus;
  for (unsigned c : machine_topology().allowed_cpus) cpus.push_back(static_cast<int>(c));
  return cpus;
}

void set_affinity(pid_t tid, const std::vector<int>& cpus) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : cpus)
    if (c < CPU_SETSIZE) CPU_SET(c, &set);
  sched_setaffinity(tid, sizeof(set), &set);
}

// Forks; the child runs the workload's check and exits 0 when it passed. Returns "" or why not.
std::string fork_and_check(stress_workload& w) {
  const pid_t pid = fork();
  if (pid < 0) return "fork failed";
  if (pid == 0) {
    alarm(20);  // a child that hangs (an inherited held lock) is killed and reported
    bool passed = false;
    try {
      passed = w.child_check();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "percpu stress: forked child's check threw: %s\n", e.what());
    } catch (...) {
    }
    _exit(passed ? 0 : 1);
  }
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) return "waitpid failed";
  if (WIFSIGNALED(status))
    return fmt::format("forked child died of signal {} (hung or crashed)", WTERMSIG(status));
  if (WEXITSTATUS(status) != 0) return "forked child's check failed";
  return "";
}

// Ends the process if a run outlives its time limit: a worker that never finishes is stuck in a
// loop over a corrupted structure (a cycle in a list, a lock nobody will release), and such
// threads can be neither joined nor cancelled. Reports the run as failed first.
class watchdog {
 public:
  watchdog(const std::string& structure, const std::string& mode, int seconds,
           const std::atomic<long>& progress, long total)
      : thread_([=, this, &progress] {
          std::unique_lock<std::mutex> lock(mutex_);
          if (done_cv_.wait_for(lock, std::chrono::seconds(seconds), [this] { return done_; }))
            return;
          fmt::print(
              "{:<14} {:<7} FAIL: still running after {} s ({} of {} operations done): "
              "hung on a corrupted structure?\n",
              structure, mode, seconds, progress.load(), total);
          std::fflush(stdout);
          std::_Exit(1);
        }) {}
  ~watchdog() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      done_ = true;
    }
    done_cv_.notify_one();
    thread_.join();
  }

 private:
  std::mutex mutex_;
  std::condition_variable done_cv_;
  bool done_ = false;
  std::thread thread_;
};

stress_result run_one(const stress_options& o, const std::string& structure, index_mode mode) {
  stress_result r;
  r.structure = structure;
  r.mode = to_string(mode);
  r.threads = o.threads;
  stress_tally tally;
  auto workload = make_stress_workload(structure, mode, o.threads, tally);
  run_control ctl;
  std::vector<worker_slot> workers(static_cast<std::size_t>(o.threads));
  std::atomic<std::uint64_t> fallback_ops{0}, signals{0}, migrations{0};
  const auto cpus = allowed_cpus();

  const long total = static_cast<long>(o.threads) * o.reps;
  watchdog dog(structure, r.mode, o.timeout_s, ctl.progress, total);
  g_workload.store(workload.get(), std::memory_order_release);
  const auto before = process_stats();
  const auto start = std::chrono::steady_clock::now();

  std::vector<std::thread> threads;
  for (int t = 0; t < o.threads; ++t) {
    threads.emplace_back([&, t] {
      workers[t].thread = pthread_self();
      workers[t].tid.store(static_cast<pid_t>(syscall(SYS_gettid)), std::memory_order_release);
      // Start together, once the helpers run: a short run must not finish before its storms.
      while (!ctl.go.load(std::memory_order_acquire)) sched_yield();
      guarded(ctl, "a worker", [&] {
        for (long i = 1; i <= o.reps; ++i) {
          workload->op(i);
          if (o.yield && i % 1000 == 0) sched_yield();
          if (i % 1024 == 0) ctl.progress.fetch_add(1024, std::memory_order_relaxed);
        }
      });
      fallback_ops.fetch_add(this_thread_stats().fallback_ops, std::memory_order_relaxed);
      ctl.workers_done.fetch_add(1, std::memory_order_acq_rel);
      // Stay alive (signals may still arrive) until the helpers have stopped.
      while (!ctl.stop_helpers.load(std::memory_order_acquire)) sched_yield();
    });
  }
  auto wait_for_tids = [&] {
    for (auto& w : workers)
      while (w.tid.load(std::memory_order_acquire) == 0) sched_yield();
  };
  wait_for_tids();

  std::vector<std::thread> helpers;
  std::atomic<int> helpers_ready{0};
  // Each helper reports once it has acted (each uses its own copy of this); the workers start
  // after all have.
  const auto ready_once_proto = [&helpers_ready, done = false]() mutable {
    if (!done) helpers_ready.fetch_add(1, std::memory_order_release);
    done = true;
  };
  if (o.signals)
    helpers.emplace_back([&] {
      auto ready_once = ready_once_proto;
      std::minstd_rand rng(1);
      while (!ctl.stop_helpers.load(std::memory_order_acquire)) {
        auto& w = workers[rng() % workers.size()];
        if (pthread_kill(w.thread, SIGUSR1) == 0) signals.fetch_add(1, std::memory_order_relaxed);
        ready_once();
        if (rng() % 8 == 0) std::this_thread::sleep_for(std::chrono::microseconds(20));
      }
    });
  if (o.migrate && cpus.size() > 1)
    helpers.emplace_back([&] {
      auto ready_once = ready_once_proto;
      std::minstd_rand rng(2);
      while (!ctl.stop_helpers.load(std::memory_order_acquire)) {
        auto& w = workers[rng() % workers.size()];
        set_affinity(w.tid.load(), {cpus[rng() % cpus.size()]});
        migrations.fetch_add(1, std::memory_order_relaxed);
        ready_once();
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
      for (auto& w : workers) set_affinity(w.tid.load(), cpus);
    });
  if (o.drain)
    helpers.emplace_back([&] {
      const int space = mode == index_mode::cpu_id ? index_space<index_mode::cpu_id>()
                                                   : index_space<index_mode::mm_cid>();
      auto ready_once = ready_once_proto;
      std::minstd_rand rng(3);
      while (!ctl.stop_helpers.load(std::memory_order_acquire)) {
        const bool ok =
            guarded(ctl, "the drainer", [&] { workload->remote(static_cast<int>(rng() % space)); });
        ready_once();
        if (!ok) break;
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
    });

  while (helpers_ready.load(std::memory_order_acquire) < static_cast<int>(helpers.size()))
    sched_yield();
  ctl.go.store(true, std::memory_order_release);
  // Fork once the workers are about halfway, while everything above is running.
  bool forked = !o.fork_child;
  while (ctl.workers_done.load(std::memory_order_acquire) < o.threads) {
    if (!forked && ctl.progress.load(std::memory_order_relaxed) >= total / 2) {
      forked = true;
      r.failure = fork_and_check(*workload);
      ++r.forks;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (!forked) {  // the workers finished between two looks: fork while the helpers still run
    r.failure = fork_and_check(*workload);
    ++r.forks;
  }
  ctl.stop_helpers.store(true, std::memory_order_release);
  for (auto& h : helpers) h.join();
  for (auto& t : threads) t.join();
  g_workload.store(nullptr, std::memory_order_release);

  const auto after = process_stats();
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  r.ops = static_cast<std::uint64_t>(total);
  r.handler_ops = tally.handler_ops.load();
  r.aborts = after.aborts - before.aborts;
  r.index_changes = after.index_changes - before.index_changes;
  r.fallback_ops = fallback_ops.load();
  r.signals = signals.load();
  r.migrations = migrations.load();
  r.drains = tally.drains.load();
  r.refused = tally.refused.load();
  guarded(ctl, "the final check", [&] { workload->verify(r); });
  if (r.failure.empty() && !ctl.error.empty()) r.failure = ctl.error;
  r.duplicated += tally.duplicated.load();
  r.corrupt += tally.corrupt.load();
  if (r.failure.empty() && (r.lost || r.duplicated || r.corrupt))
    r.failure = fmt::format("lost {}, duplicated {}, corrupt {}", r.lost, r.duplicated, r.corrupt);
  // A run whose storms never happened proves nothing: say so instead of passing.
  if (r.failure.empty() && o.signals && r.signals == 0)
    r.failure = "the signal storm sent no signal during the run";
  if (r.failure.empty() && o.migrate && cpus.size() > 1 && r.migrations == 0)
    r.failure = "no worker was migrated during the run";
  if (r.failure.empty() && o.drain && structure != "spinlock" && r.drains == 0)
    r.failure = "no remote drain (counter: reset) ran during the run";
  if (r.failure.empty() && o.require_aborts && rseq_active() && r.aborts == 0)
    r.failure = "no critical section was aborted: the run did not test the abort paths";
  return r;
}

nlohmann::json to_json(const stress_result& r) {
  return {{"structure", r.structure},
          {"mode", r.mode},
          {"threads", r.threads},
          {"ops", r.ops},
          {"handler_ops", r.handler_ops},
          {"aborts", r.aborts},
          {"index_changes", r.index_changes},
          {"fallback_ops", r.fallback_ops},
          {"signals", r.signals},
          {"migrations", r.migrations},
          {"drains", r.drains},
          {"drains_refused", r.refused},
          {"forks", r.forks},
          {"lost", r.lost},
          {"duplicated", r.duplicated},
          {"corrupt", r.corrupt},
          {"seconds", r.seconds},
          {"passed", r.failure.empty()},
          {"failure", r.failure}};
}

}  // namespace

int run_stress(const stress_options& given) {
  stress_options o = given;
  const int cpus = static_cast<int>(machine_topology().allowed_cpus.size());
  if (o.threads <= 0) o.threads = std::max(16, 4 * cpus);
  if (o.reps <= 0) o.reps = 1000000;
  if (o.inject_loops > 0 && !detail::kInjectDelays) {
    std::fprintf(stderr,
                 "percpu stress: --inject-loops needs a build with injection points "
                 "(cmake --preset stress, or -DPERCPU_INJECT_DELAYS=ON)\n");
    return 2;
  }
  for (int p = 1; p <= 3; ++p) detail::g_inject_loops[p] = o.inject_loops;
  if (!can_write(o.json_out)) return 1;  // before the runs, not after

  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGUSR1, &sa, nullptr);

  const auto reg = registration();
  fmt::print(
      "percpu stress: {} workers on {} CPUs, {} ops each, {}; injection {}; signals {}, "
      "migration {}, yield {}, fork {}, drains {}\n",
      o.threads, cpus, o.reps,
      rseq_active() ? "rseq mode" : "fallback mode (" + reg.fallback_reason + ")",
      detail::kInjectDelays ? fmt::format("{} loops", o.inject_loops) : "not built",
      o.signals ? "on" : "off", o.migrate ? "on" : "off", o.yield ? "on" : "off",
      o.fork_child ? "on" : "off", o.drain ? "on" : "off");
  std::fflush(stdout);
  fmt::print(
      "{:<14} {:<7} {:>11} {:>9} {:>9} {:>8} {:>11} {:>8} {:>8} {:>7} {:>7} {:>5} {:>5} {:>6}\n",
      "structure", "mode", "ops", "handler", "aborts", "moved", "fallback", "signals", "migrate",
      "drains", "nofence", "lost", "dup", "result");
  nlohmann::json all = nlohmann::json::array();
  int failed = 0;
  for (int rep = 0; rep < o.repetitions; ++rep)
    for (const auto& s : o.structures)
      for (const auto& m : o.modes) {
        const auto r = run_one(o, s, m == "mm_cid" ? index_mode::mm_cid : index_mode::cpu_id);
        fmt::print(
            "{:<14} {:<7} {:>11} {:>9} {:>9} {:>8} {:>11} {:>8} {:>8} {:>7} {:>7} {:>5} {:>5} "
            "{:>6}\n",
            r.structure, r.mode, r.ops, r.handler_ops, r.aborts, r.index_changes, r.fallback_ops,
            r.signals, r.migrations, r.drains, r.refused, r.lost, r.duplicated,
            r.failure.empty() ? "ok" : "FAIL");
        if (!r.failure.empty()) {
          fmt::print("  FAILED: {}\n", r.failure);
          ++failed;
        }
        std::fflush(stdout);
        all.push_back(to_json(r));
      }
  if (!o.json_out.empty() && !write_text_file(o.json_out, all.dump(2) + "\n")) return 1;
  fmt::print("{} runs, {} failed\n", all.size(), failed);
  return failed == 0 ? 0 : 1;
}

}  // namespace percpu::cli
