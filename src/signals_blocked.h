// Blocking every signal on the calling thread: how percpu keeps a signal handler that uses
// percpu from running inside a region it must not interrupt (a thread-local list being changed,
// a mutex or a stripe the handler might take again). A scope uses signals_blocked; a region that
// does not fit one scope (fork()'s prepare and after handlers, remote_section, whose saved mask
// lives in a public class) uses the two functions under it.
#pragma once

#include <signal.h>

#include <atomic>

namespace percpu::detail {

/// Blocks every signal on the calling thread and stores the previous mask in `saved`
/// (pthread_sigmask: one system call). Async-signal-safe. The signal fence keeps the compiler
/// from moving accesses of the guarded region (often thread-local data whose address never
/// escapes) above the system call.
inline void block_all_signals(sigset_t& saved) noexcept {
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &saved);
  std::atomic_signal_fence(std::memory_order_seq_cst);
}

/// Restores the mask block_all_signals() saved. Async-signal-safe.
inline void restore_signals(const sigset_t& saved) noexcept {
  std::atomic_signal_fence(std::memory_order_seq_cst);
  pthread_sigmask(SIG_SETMASK, &saved, nullptr);
}

/// Blocks every signal on the calling thread from construction to destruction, then restores
/// the previous mask (two system calls). Async-signal-safe. As a class's first member, it keeps
/// signals blocked for the whole of the class's constructor and destructor bodies.
class signals_blocked {
 public:
  signals_blocked() noexcept { block_all_signals(saved_); }
  ~signals_blocked() { restore_signals(saved_); }
  signals_blocked(const signals_blocked&) = delete;
  signals_blocked& operator=(const signals_blocked&) = delete;

 private:
  sigset_t saved_;
};

}  // namespace percpu::detail
