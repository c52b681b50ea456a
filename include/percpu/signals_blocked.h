// Blocking every signal on the calling thread for a scope: how percpu keeps a signal handler
// that uses percpu from running inside a region it must not interrupt (a thread-local list
// being changed, a mutex the handler might take again).
#pragma once

#include <signal.h>

#include <atomic>

namespace percpu::detail {

/// Blocks every signal on the calling thread from construction to destruction, then restores
/// the previous mask (pthread_sigmask: two system calls). Async-signal-safe. The signal fences
/// keep the compiler from moving accesses of the guarded region (often thread-local data whose
/// address never escapes) across the system calls.
class signals_blocked {
 public:
  signals_blocked() noexcept {
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &saved_);
    std::atomic_signal_fence(std::memory_order_seq_cst);
  }
  ~signals_blocked() {
    std::atomic_signal_fence(std::memory_order_seq_cst);
    pthread_sigmask(SIG_SETMASK, &saved_, nullptr);
  }
  signals_blocked(const signals_blocked&) = delete;
  signals_blocked& operator=(const signals_blocked&) = delete;

 private:
  sigset_t saved_;
};

}  // namespace percpu::detail
