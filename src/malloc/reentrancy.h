// How percpu malloc stays usable from signal handlers: a handler may interrupt the allocator
// anywhere, including inside its own locked slow paths (the central lists' and the page heap's
// mutexes). The fast paths are rseq critical sections (the kernel restarts an interrupted one)
// and need no lock. Every locked region counts itself in t_locks; an allocation or free that
// finds the count above zero on its own thread can only come from a handler that interrupted
// such a region (the allocator never calls malloc while it holds a lock), and must not take a
// lock: it uses the per-CPU cache without locks, and otherwise an allocation fails with ENOMEM
// and a free is deferred to the thread's next slow path (free()'s slow path, in
// allocator.cpp).
#pragma once

#include <pthread.h>

namespace percpu::malloc_impl {

/// Locked regions of percpu malloc the calling thread is inside.
inline __attribute__((tls_model("initial-exec"))) thread_local int t_locks = 0;

/// Holds a mutex and counts itself in t_locks for as long as it lives. A mutex found held is
/// retried a while before the thread sleeps on it (as glibc's PTHREAD_MUTEX_ADAPTIVE_NP does):
/// the allocator's locked regions are short (a batch copied, a span carved), and a futex wait
/// and wake cost far more than the wait (on a VM, several microseconds each).
class counted_lock {
 public:
  explicit counted_lock(pthread_mutex_t* m) noexcept : m_(m) {
    ++t_locks;
    if (pthread_mutex_trylock(m_) == 0) return;
    for (int i = 0; i < kSpins; ++i) {
#if defined(__x86_64__)
      __builtin_ia32_pause();
#elif defined(__aarch64__)
      asm volatile("yield");
#endif
      // Read before trying: a failed trylock is a locked cmpxchg, which takes the line away
      // from the holder (glibc's mutex: __lock is 0 when free).
#if defined(__GLIBC__)
      if (__atomic_load_n(&m_->__data.__lock, __ATOMIC_RELAXED) != 0) continue;
#endif
      if (pthread_mutex_trylock(m_) == 0) return;
    }
    pthread_mutex_lock(m_);
  }
  ~counted_lock() {
    pthread_mutex_unlock(m_);
    --t_locks;
  }
  counted_lock(const counted_lock&) = delete;
  counted_lock& operator=(const counted_lock&) = delete;

 private:
  static constexpr int kSpins = 100;
  pthread_mutex_t* m_;
};

}  // namespace percpu::malloc_impl
