// `percpu stress`: the structures under preemption, migration, signals, fork and remote drains,
// with delay loops inside the critical sections in builds that have injection points.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

#include <percpu/cpu.h>

namespace percpu::cli {

/// What a stress run does besides the workers' own operations.
struct stress_options {
  std::vector<std::string> structures;  ///< counter, freelist, buffer, memcpy_buffer, spinlock,
                                        ///< rwsem, ref, batched, histogram, pool, malloc
  std::vector<std::string> modes;       ///< cpu_id, mm_cid
  int threads = 0;                      ///< worker threads (0: 4 per allowed CPU, at least 16)
  long reps = 0;                        ///< operations per worker (0: 1,000,000)
  int repetitions = 1;                  ///< runs of each structure and mode
  unsigned inject_loops = 0;            ///< delay loop iterations at each injection point
  bool signals = true;                  ///< signal storm whose handler uses the structure
  bool migrate = true;                  ///< a thread moving the workers between CPUs
  bool yield = true;                    ///< workers call sched_yield now and then
  bool fork_child = true;               ///< fork in the middle of each run
  bool drain = true;                    ///< a thread draining (or resetting) other indices
  int timeout_s = 300;                  ///< a run still going after this many seconds fails
  bool require_aborts = false;          ///< fail a run in rseq mode that saw no abort
  std::string json_out;                 ///< write the results here when not empty
};

/// What one run counted and found.
struct stress_result {
  std::string structure, mode;
  int threads = 0;
  std::uint64_t ops = 0;          ///< worker operations
  std::uint64_t handler_ops = 0;  ///< operations done inside signal handlers
  std::uint64_t aborts = 0, index_changes = 0, fallback_ops = 0;
  std::uint64_t signals = 0, migrations = 0, drains = 0, forks = 0;
  std::uint64_t refused = 0;  ///< drains refused: no fence possible (remote_errc::no_fence)
  std::uint64_t lost = 0, duplicated = 0, corrupt = 0;
  std::string failure;  ///< empty when the run passed
  double seconds = 0;
};

/// The shared state a workload's operations report into.
struct stress_tally {
  std::atomic<std::uint64_t> handler_ops{0};
  std::atomic<std::uint64_t> duplicated{0};  ///< an item held by two threads at once
  std::atomic<std::uint64_t> corrupt{0};     ///< a torn record, a broken invariant
  std::atomic<std::uint64_t> drains{0};
  std::atomic<std::uint64_t> refused{0};  ///< drains refused for want of a fence (nothing moved)

  /// Counts a drain that ran (no error: returns true) or was refused (returns false).
  bool count_drain(const std::error_code& error) {
    (error ? refused : drains).fetch_add(1, std::memory_order_relaxed);
    return !error;
  }
};

/// One structure under test. op() runs on workers, signal_op() inside a signal handler (it
/// must be async-signal-safe), remote() on the drainer thread, child_check() in a forked child,
/// verify() after every thread has stopped.
class stress_workload {
 public:
  virtual ~stress_workload() = default;
  virtual void op(long i) = 0;
  virtual void signal_op() noexcept = 0;
  virtual void remote(int index) = 0;
  virtual bool child_check() = 0;
  /// Fills lost / duplicated / corrupt of `r` (ops and handler_ops are already set).
  virtual void verify(stress_result& r) = 0;
};

/// Creates the workload for `structure` in `mode` for `threads` workers.
std::unique_ptr<stress_workload> make_stress_workload(const std::string& structure, index_mode mode,
                                                      int threads, stress_tally& tally);

/// Runs `percpu stress`; returns the exit status (0 when every run passed).
int run_stress(const stress_options& options);

}  // namespace percpu::cli
