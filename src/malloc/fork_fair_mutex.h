// A mutex that fork()'s prepare handler takes without being starved: the lock of percpu
// malloc's introspection (mallinfo2, malloc_stats, malloc_info, the statistics printer), which a
// program may call in a loop on one thread while another forks.
#pragma once

#include <pthread.h>

namespace percpu::malloc_impl {

/// A mutex with a turnstile in front of it. A plain pthread mutex is not fair: a thread that
/// unlocks and locks again in a loop takes it back before a waiter woken by the unlock has run,
/// so fork()'s prepare handler, waiting for it, could wait for as long as the loop runs.
/// Here lock() passes the turnstile (holds it only until it owns the mutex), and
/// lock_for_fork() holds the turnstile while it waits: once fork() has it, no new holder can
/// come in ahead, and fork() waits for the holder of the moment only.
///
/// Invariant: the turnstile is held by a lock() only between its two pthread calls, or by a
/// fork from lock_for_fork() to unlock_after_fork(), which runs in the parent and in the child
/// (there by the forking thread, the only one).
/// Not async-signal-safe, like the mutex it replaces: a fork() from a signal handler that
/// interrupted its own thread inside lock() or while it held the mutex deadlocks.
class fork_fair_mutex {
 public:
  void lock() noexcept {
    pthread_mutex_lock(&turnstile_);
    pthread_mutex_lock(&mutex_);
    pthread_mutex_unlock(&turnstile_);
  }
  void unlock() noexcept { pthread_mutex_unlock(&mutex_); }

  /// fork()'s prepare handler: the turnstile, then the mutex.
  void lock_for_fork() noexcept {
    pthread_mutex_lock(&turnstile_);
    pthread_mutex_lock(&mutex_);
  }
  /// fork()'s parent and child handlers.
  void unlock_after_fork() noexcept {
    pthread_mutex_unlock(&mutex_);
    pthread_mutex_unlock(&turnstile_);
  }

 private:
  pthread_mutex_t turnstile_ = PTHREAD_MUTEX_INITIALIZER;
  pthread_mutex_t mutex_ = PTHREAD_MUTEX_INITIALIZER;
};

}  // namespace percpu::malloc_impl
