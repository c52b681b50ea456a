// A per-CPU spinlock: one lock word per index, taken with a compare-and-store critical section on
// the calling thread's index. For per-CPU data that needs more than one store to update.
#pragma once

#include <sched.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "percpu/config.h"
#include "percpu/ops.h"
#include "percpu/slot_array.h"

namespace percpu {

/// One lock per index of mode M, each on its own cache line. lock() takes the lock of the index
/// the calling thread runs on and returns that index: the caller then owns that index's data
/// until unlock(index), even if it migrates meanwhile (another CPU's threads then take their own
/// locks; threads arriving on the locked index wait). Uncontended, lock() is one critical
/// section (no atomic instruction) and unlock() one store.
///
/// Not recursive, and not async-signal-safe against itself: a signal handler taking the lock
/// its own thread holds waits forever (use try_lock() in handlers). Like any lock, one held by
/// another thread at fork() stays held in the child, where that thread does not exist. In fallback
/// mode the same calls serialize through the fallback's compare-and-swap.
template <index_mode M = index_mode::cpu_id>
class spinlock {
 public:
  /// Unlocked locks with slots of their own (one cache line per index).
  spinlock() : locks_(index_space<M>()) {}

  /// Unlocked locks in one 8-byte object of `from` (which must outlive them). Throws as
  /// slot_array's pool constructor.
  explicit spinlock(pool<M>& from) : locks_(index_space<M>(), from) {}

  /// Takes the lock of the calling thread's current index and returns that index. Spins while
  /// another thread holds it (yielding the CPU after a short spin, so a holder that was
  /// preempted on this CPU can run).
  int lock() noexcept {
    for (unsigned spins = 0;; ++spins) {
      const int index = try_lock();
      if (index >= 0) return index;
      if (spins < 64) {
        PERCPU_CPU_RELAX();
      } else {
        sched_yield();
      }
    }
  }

  /// Takes the lock of the calling thread's current index if it is free: returns the index, or
  /// -1 when another thread holds it.
  int try_lock() noexcept {
    int taken = -1;
    const status s = retry<M>([&](int index) {
      taken = index;
      return compare_store<M>(&locks_[index], 0, 1, index);
    });
    return s == status::committed ? taken : -1;
  }

  /// Releases the lock of `index` (the value lock() returned), from any CPU.
  /// Throws std::out_of_range for an index outside the index space and std::logic_error when
  /// that lock is not held; nothing changes then.
  void unlock(int index) {
    std::intptr_t held = 1;
    if (!__atomic_compare_exchange_n(&locks_.at(index), &held, 0, false, __ATOMIC_RELEASE,
                                     __ATOMIC_RELAXED))
      throw std::logic_error("percpu::spinlock::unlock: lock of index " + std::to_string(index) +
                             " is not held");
  }

  /// True when the lock of `index` is held (a snapshot). Throws std::out_of_range.
  bool is_locked(int index) const {
    return __atomic_load_n(&locks_.at(index), __ATOMIC_ACQUIRE) != 0;
  }

  /// Number of locks (the index space of M).
  int slots() const noexcept { return locks_.size(); }

  /// Holds the calling thread's index lock for a scope; index() says which data it guards.
  class guard {
   public:
    explicit guard(spinlock& lock) noexcept : lock_(lock), index_(lock.lock()) {}
    ~guard() { lock_.unlock(index_); }
    guard(const guard&) = delete;
    guard& operator=(const guard&) = delete;
    /// The index whose lock is held.
    int index() const noexcept { return index_; }

   private:
    spinlock& lock_;
    int index_;
  };

 private:
  slot_array<std::intptr_t> locks_;
};

}  // namespace percpu
