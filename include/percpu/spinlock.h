// A per-CPU spinlock: one lock word per index, taken with a compare-and-store critical section on
// the calling thread's index. For per-CPU data that needs more than one store to update.
#pragma once

#define PERCPU_PUBLIC_HEADER 1  // lets it include percpu/internal/

#include <sched.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "percpu/current_ops.h"
#include "percpu/internal/config.h"
#include "percpu/ops.h"
#include "percpu/slice.h"
#include "percpu/slot_array.h"
#include "percpu/tsan.h"

namespace percpu {

/// One lock per index of mode M, each on its own cache line. lock() takes the lock of the index
/// the calling thread runs on and returns that index: the caller then owns that index's data
/// until unlock(index), even if it migrates meanwhile (another CPU's threads then take their own
/// locks; threads arriving on the locked index wait). Uncontended, lock() is one critical
/// section (no atomic instruction) and unlock() a checked store; a guard's release is a bare
/// store.
///
/// Memory order: taking a lock (lock(), a successful try_lock(), a guard) is an acquire and
/// releasing it (unlock(), the guard's end) a release, so a holder sees every write the
/// previous holder made under the lock, whichever CPU it released it from. Under
/// ThreadSanitizer (tsan.h) the same edges are told to TSan on the lock word.
///
/// Not recursive, and not async-signal-safe against itself: a signal handler taking the lock
/// its own thread holds waits forever (use try_lock() in handlers). Like any lock, one held by
/// another thread at fork() stays held in the child, where that thread does not exist. In fallback
/// mode the same calls serialize through the fallback's compare-and-swap.
///
/// With X = slice_extension::request, a holder asks the kernel for a time-slice extension while
/// it holds a lock (slice.h): taking a lock requests one, releasing it ends the request and yields
/// if the kernel granted one. Where the kernel does not offer it, that costs a branch on each
/// side; with X = off (the default), nothing. With X = request, unlock on the thread that locked
/// (the request is that thread's), and call enable_slice_extension() on a thread before a signal
/// handler there may take the lock (the first request initializes percpu if nothing has).
template <index_mode M = index_mode::cpu_id, slice_extension X = slice_extension::off>
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
  PERCPU_ALWAYS_INLINE int lock() noexcept { return acquire().index; }

  /// Takes the lock of the calling thread's current index if it is free: returns the index, or
  /// -1 when another thread holds it.
  PERCPU_ALWAYS_INLINE int try_lock() noexcept {
    std::intptr_t* word;
    int index;
    const detail::current_result r = detail::current_compare_store<M>(locks_, 0, 1, word, index);
    if (PERCPU_LIKELY(r == detail::current_result::committed)) {
      acquired(word);
      return index;
    }
    if (r == detail::current_result::miss) return -1;
    return try_lock_cold(detail::fast_status(r));
  }

  /// Releases the lock of `index` (the value lock() returned), from any CPU: one release store.
  /// Throws std::out_of_range for an index outside the index space and std::logic_error when
  /// that lock is not held; nothing changes then. (A second unlock that races with the holder's
  /// own unlock can go unnoticed: telling those apart would take an atomic instruction on every
  /// unlock.)
  PERCPU_ALWAYS_INLINE void unlock(int index) {
    std::intptr_t& word = locks_.at(index);
    if (PERCPU_UNLIKELY(__atomic_load_n(&word, __ATOMIC_RELAXED) != 1)) throw_not_held(index);
    detail::tsan_release(&word);
    __atomic_store_n(&word, 0, __ATOMIC_RELEASE);
    released();
  }

  /// True when the lock of `index` is held (a snapshot). Throws std::out_of_range.
  bool is_locked(int index) const {
    return __atomic_load_n(&locks_.at(index), __ATOMIC_ACQUIRE) != 0;
  }

  /// Number of locks (the index space of M).
  int slots() const noexcept { return locks_.size(); }

 private:
  // A lock taken: its word and its index (what guard keeps).
  struct held_lock {
    std::intptr_t* word;
    int index;
  };

 public:
  /// Holds the calling thread's index lock for a scope; index() says which data it guards.
  ///
  /// The guard took the lock itself, so its release needs none of unlock()'s checks: it keeps
  /// the lock word's address and releases with one store, as a hand-written lock would. Do not
  /// also unlock(index()) while the guard lives (the guard's release would then free a lock
  /// that another thread may hold by then).
  class guard {
   public:
    PERCPU_ALWAYS_INLINE explicit guard(spinlock& lock) noexcept : held_(lock.acquire()) {}
    ~guard() {
      detail::tsan_release(held_.word);
      __atomic_store_n(held_.word, 0, __ATOMIC_RELEASE);
      released();
    }
    guard(const guard&) = delete;
    guard& operator=(const guard&) = delete;
    /// The index whose lock is held.
    int index() const noexcept { return held_.index; }

   private:
    held_lock held_;
  };

 private:
  // lock(), also returning the word, so that a guard's release neither indexes nor checks
  // again. The cold path returns both too (in two registers), so the caller keeps nothing
  // of its own alive across that call.
  PERCPU_ALWAYS_INLINE held_lock acquire() noexcept {
    std::intptr_t* word;
    int index;
    const detail::current_result r = detail::current_compare_store<M>(locks_, 0, 1, word, index);
    if (PERCPU_LIKELY(r == detail::current_result::committed)) {
      acquired(word);
      return {word, index};
    }
    return acquire_cold(detail::fast_status(r));
  }
  [[gnu::noinline, gnu::cold]] held_lock acquire_cold(status fast) noexcept {
    int index = try_lock_cold(fast);
    if (index < 0) index = lock_cold();
    return {&locks_[index], index};
  }

  // lock() when the lock is held: spin, then yield.
  [[gnu::noinline, gnu::cold]] int lock_cold() noexcept {
    for (unsigned spins = 0;; ++spins) {
      if (spins < 64) {
        PERCPU_CPU_RELAX();
      } else {
        sched_yield();
      }
      const int index = try_lock();
      if (index >= 0) return index;
    }
  }

  // try_lock() after its fast attempt did not decide: the full loop, fallback mode included.
  [[gnu::noinline, gnu::cold]] int try_lock_cold(status fast) noexcept {
    detail::count_fast_attempt(fast);
    int taken = -1;
    const status s = retry<M>([&](int index) {
      taken = index;
      return compare_store<M>(&locks_[index], 0, 1, index);
    });
    if (s != status::committed) return -1;
    acquired(&locks_[taken]);
    return taken;
  }

  // Orders the holder's accesses after its read of the free lock word: the section reads the
  // word with a plain load and commits with a store (a store-release on aarch64, which orders
  // nothing after it), and the fallback's compare-and-swap is release-only. Without this an
  // aarch64 holder could read the data before the word, and so before the previous holder's
  // writes (that holder may have unlocked from another CPU). On x86-64 loads are not reordered
  // with older loads: this is only a compiler barrier there, and costs no instruction.
  // It also starts the holder's time-slice extension request, with X = request. Under TSan
  // (tsan.h) it acquires the lock word `word`, which every release stores to after a
  // tsan_release(): the section's read of the word is asm, invisible to TSan.
  static PERCPU_ALWAYS_INLINE void acquired([[maybe_unused]] std::intptr_t* word) noexcept {
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    detail::tsan_acquire(word);
    if constexpr (X == slice_extension::request) (void)slice_request();
  }

  // After a release: ends the holder's request (with X = request). A thread's extension state
  // is set before its first request, so the state says whether acquired() made one; a release
  // by a thread that holds no request (one unlocking another thread's lock) changes nothing, and
  // the locking thread's request stays open: unlock on the thread that locked.
  static PERCPU_ALWAYS_INLINE void released() noexcept {
    if constexpr (X == slice_extension::request) slice_release(detail::t_slice_state == 1);
  }

  [[noreturn, gnu::noinline, gnu::cold]] static void throw_not_held(int index) {
    throw std::logic_error("percpu::spinlock::unlock: lock of index " + std::to_string(index) +
                           " is not held");
  }

  slot_array<std::intptr_t> locks_;
};

}  // namespace percpu
