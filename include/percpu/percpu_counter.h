// percpu_counter: a batched per-CPU counter with the kernel's contract (lib/percpu_counter.c):
// adds go to the calling CPU's slot and fold into one shared count when the slot's magnitude
// would reach the batch, so read() is one load, within a stated bound of the exact value, and
// sum() is exact. limited_add() is the budget: it never takes the count past a limit.
#pragma once

#define PERCPU_PUBLIC_HEADER 1  // lets it include percpu/internal/

#include "percpu/internal/config.h"  // first: the C++20 check

#include <atomic>
#include <cstdint>
#include <system_error>

#include "percpu/current_ops.h"
#include "percpu/ops.h"
#include "percpu/pool.h"
#include "percpu/remote.h"
#include "percpu/slot_array.h"

namespace percpu {

namespace detail {

/// The part of percpu_counter that does not depend on the index mode: its words, the fold
/// lock, sum(), and limited_add()'s shared path and drain, compiled in the library
/// (percpu_counter.cpp).
class batched_core {
 public:
  batched_core(const batched_core&) = delete;
  batched_core& operator=(const batched_core&) = delete;

  /// percpu_counter::sum(), error_bound(), and limited_add()'s path on the shared count.
  PERCPU_API std::int64_t sum() const noexcept;
  std::int64_t error_bound() const noexcept { return bound_; }
  PERCPU_API remote_result<bool> limited_add_shared(std::int64_t n, std::int64_t limit) noexcept;

  /// Values of gate_ (nonzero closes every slot's section). kDraining: limited_add() is folding
  /// the slots after a fence. kExact: folded, and kept closed for a while (every add goes to
  /// the shared count, which is then the exact value) so that refusals near a limit need no
  /// fence each.
  static constexpr std::intptr_t kDraining = 1;
  static constexpr std::intptr_t kExact = 2;
  /// fork(): its prepare handler takes every counter's fold lock (none is then half done), the
  /// parent's and child's release them.
  void fork_lock() noexcept;
  void fork_unlock() noexcept;

  /// The largest batch: slots and their sums stay far from overflow.
  static constexpr std::int64_t kMaxBatch = std::int64_t{1} << 40;

 protected:
  PERCPU_API batched_core(int slots, std::int64_t batch);
  PERCPU_API batched_core(int slots, pool_base& from, std::int64_t batch);
  PERCPU_API ~batched_core();

  /// Takes the fold lock (odd seq_): with `wait`, spins and yields until it has it; without,
  /// returns false at once when another thread (or a fork()) has it.
  PERCPU_API bool fold_begin(bool wait) noexcept;
  PERCPU_API void fold_end() noexcept;
  /// kExact's window is over: reopens the slots (checks the clock once in 64 calls).
  PERCPU_API void maybe_reopen() noexcept;
  /// The shared count's add, for adds a slot cannot take.
  void add_shared(std::intptr_t n) noexcept { count_.fetch_add(n, std::memory_order_relaxed); }

  slot_array<std::intptr_t> slots_;
  const std::intptr_t batch_;
  // The slot range as the bounded and capped adds take it (low, span): every slot stays
  // within [-(batch - 1), batch - 1]. Kept, not derived at each add: two loads, no arithmetic.
  const std::intptr_t low_ = -(batch_ - 1);
  const std::uintptr_t span_ = static_cast<std::uintptr_t>(2 * (batch_ - 1));
  const std::int64_t bound_ = (batch_ - 1) * (std::int64_t{slots_.size()} + 2);
  // Read by every section: a line of its own.
  alignas(64) std::intptr_t gate_ = 0;
  // The shared count, and the fold lock's sequence (odd while a thread moves value between
  // the slots and the count: sum() retries across it).
  alignas(64) std::atomic<std::int64_t> count_{0};
  std::atomic<std::uint32_t> seq_{0};
  std::atomic<std::uint32_t> reopen_calls_{0};
  std::atomic<std::int64_t> reopen_at_ns_{0};
  std::int64_t fence_ns_ = 0;  // under the fold lock

 private:
  void enroll();

 public:  // the registry's links (percpu_counter.cpp), under its mutex
  batched_core* next_ = nullptr;
  batched_core* prev_ = nullptr;
};

}  // namespace detail

/// A batched per-CPU counter of a signed 64-bit value, indexed by cpu_id or mm_cid (M): the
/// kernel's percpu_counter (lib/percpu_counter.c) on rseq.
///
/// add(n) is one critical section on the calling CPU's slot while the slot stays within
/// (-batch, batch); the add that would take it out folds the slot, with n, into the shared
/// count (one atomic add; percpu_counter_add_batch). An add of |n| >= batch goes to the shared
/// count directly. So:
/// - read() is one load of the shared count (percpu_counter_read): it differs from the exact
///   value by at most error_bound() = (batch - 1) * (slots() + 2) (each slot's share, plus one
///   fold in flight).
/// - sum() is exact (percpu_counter_sum): the shared count plus every slot, read while no fold
///   moves value between them; it counts every add that completed before it began.
/// - compare(x) answers exactly, reading the slots only when read() is within the bound of x
///   (__percpu_counter_compare).
/// - limited_add(n, limit) adds n > 0 only if the exact value stays at most `limit`
///   (percpu_counter_limited_add): on the calling CPU's slot, in one section that also checks
///   that the shared count is at most limit - error_bound() - n (the slots together cannot
///   then take the value past the limit); nearer the limit, with a compare-and-swap on the
///   shared count under the same margin; and when the answer depends on value the slots hold,
///   it closes them, fences every CPU (try_fence_all()) and folds them, so that the shared
///   count is the exact value and the answer exact. The slots then stay closed for ten times
///   that fence's cost (every add goes to the shared count), so a counter that sits at its
///   limit pays one fence per such window, not one per refusal.
///
/// The guarantee: a limited_add() that returns true leaves the exact value at most its limit,
/// and one that returns false saw the exact value above limit - n, under any concurrency of
/// limited_add(), sub() and negative add() calls, in both index modes and in fallback mode.
/// add() of a positive n is not limited (it can take the value past any limit, as in the
/// kernel); a limited_add() running while one does is exact up to that add.
///
/// The batch: chosen at construction; 0 selects max(64, 2 * slots()), twice the kernel's
/// minimum (lib/percpu_counter.c's percpu_counter_batch is max(32, 2 * CPUs)): a fold costs
/// more here against a one-nanosecond add than the kernel's against its own, and halving how
/// often it comes keeps add() near percpu::counter's. A larger batch makes read() coarser and
/// folds rarer.
///
/// Cost (x86-64, rseq mode; percpu bench counters): add() about one percpu::counter add plus a
/// compare, read() one load; a fold one atomic add once per batch of adds; sum() O(slots()).
/// Values wrap as int64 two's complement would (the arithmetic is unsigned inside).
///
/// Thread and signal safety: every member may be called from any thread. add(), sub() and
/// read() are async-signal-safe (a fold that finds the fold lock taken, by its own thread
/// too, adds to the shared count instead of waiting). sum() and compare() wait for a fold in
/// flight and limited_add() may fence and wait for another's drain: call them from threads, not
/// from a signal handler that may interrupt a fold. No member is a cancellation point.
/// fork(): a fold or drain in progress in another thread is finished before the fork (its
/// prepare handler takes each counter's fold lock; adds meanwhile go to the shared count).
template <index_mode M = index_mode::cpu_id>
class percpu_counter : private detail::batched_core {
 public:
  /// A zero counter with slots of its own (one cache line per index). `batch` 0 takes the
  /// default; otherwise 1 <= batch <= 2^40, else std::invalid_argument. Throws std::bad_alloc
  /// without address space.
  explicit percpu_counter(std::int64_t batch = 0) : batched_core(index_space<M>(), batch) {}

  /// The same with its slots one 8-byte object of `from` (which must outlive it). Throws as
  /// slot_array's pool constructor, and std::invalid_argument for a bad batch.
  explicit percpu_counter(pool<M>& from, std::int64_t batch = 0)
      : batched_core(index_space<M>(), from, batch) {}

  /// Adds n (may be negative).
  PERCPU_ALWAYS_INLINE void add(std::int64_t n) noexcept {
    const detail::current_result r =
        detail::current_bounded_add<M>(slots_, &gate_, static_cast<std::intptr_t>(n), low_, span_);
    if (PERCPU_LIKELY(r == detail::current_result::committed)) return;
    add_cold(static_cast<std::intptr_t>(n), r);
  }

  /// Subtracts n.
  PERCPU_ALWAYS_INLINE void sub(std::int64_t n) noexcept {
    add(static_cast<std::int64_t>(0 - static_cast<std::uint64_t>(n)));
  }

  /// The shared count: O(1), within error_bound() of the exact value.
  std::int64_t read() const noexcept { return count_.load(std::memory_order_relaxed); }

  /// The exact value: every add that completed before the call is in it. O(slots()).
  std::int64_t sum() const noexcept { return batched_core::sum(); }

  /// The most read() may differ from the exact value: (batch() - 1) * (slots() + 2).
  std::int64_t error_bound() const noexcept { return batched_core::error_bound(); }

  /// -1, 0 or 1 as the exact value is below, equal to or above x; cheap (one load) when
  /// read() is farther than error_bound() from x, sum() otherwise.
  int compare(std::int64_t x) const noexcept {
    const __int128 r = read();
    if (r > __int128{x} + error_bound()) return 1;
    if (r < __int128{x} - error_bound()) return -1;
    const std::int64_t s = sum();
    return s < x ? -1 : (s > x ? 1 : 0);
  }

  /// Adds n if the exact value then stays at most `limit`; returns whether it added. n <= 0
  /// always adds. Throws std::system_error (remote_errc::no_fence) when the answer needs a
  /// fence and none is possible (see try_fence_all()); nothing is added then.
  bool limited_add(std::int64_t n, std::int64_t limit) {
    const remote_result<bool> r = limited_add_or_error(n, limit);
    if (r.error) throw std::system_error(r.error, "percpu_counter::limited_add");
    return r.value;
  }

  /// limited_add(), returning the error (value false) instead of throwing.
  PERCPU_ALWAYS_INLINE remote_result<bool> limited_add_or_error(std::int64_t n,
                                                                std::int64_t limit) noexcept {
    if (n <= 0) {
      add(n);
      return {true, {}};
    }
    // On the calling CPU's slot while the shared count is far enough below the limit that the
    // slots together cannot take the exact value past it.
    const std::intptr_t cap = fast_cap(n, limit);
    // INT64_MIN may stand for a cap below every count, which the slot's check (count <= cap)
    // would let a count of INT64_MIN pass: the shared count's path decides then.
    if (PERCPU_UNLIKELY(cap == INT64_MIN)) return limited_add_shared(n, limit);
    const detail::current_result r = detail::current_capped_add<M>(
        slots_, &gate_, count_word(), cap, static_cast<std::intptr_t>(n), low_, span_);
    if (PERCPU_LIKELY(r == detail::current_result::committed)) return {true, {}};
    return limited_add_cold(n, limit, cap, r);
  }

  /// The batch (slots stay within (-batch, batch)).
  std::int64_t batch() const noexcept { return batch_; }

  /// Number of slots (the index space of M).
  int slots() const noexcept { return slots_.size(); }

 private:
  static constexpr int kSectionRetries = 8;

  const std::intptr_t* count_word() const noexcept {
    static_assert(sizeof(count_) == sizeof(std::intptr_t));
    return reinterpret_cast<const std::intptr_t*>(&count_);
  }
  // The highest shared count at which the slots may take n: limit - error_bound() - n,
  // saturated at INT64_MIN (which limited_add_or_error() leaves to the shared path).
  std::intptr_t fast_cap(std::int64_t n, std::int64_t limit) const noexcept {
    const __int128 cap = __int128{limit} - bound_ - n;
    return cap < INT64_MIN ? INT64_MIN : static_cast<std::intptr_t>(cap);
  }

  bool in_range(std::intptr_t v, std::intptr_t high) const noexcept {
    return v >= low_ && v <= high;
  }

  // One attempt loop on the current slot: if the slot's value v satisfies `keep(v)`, stores
  // `next(v)` there (through the gate). Returns committed, or compare_failed with `refused`
  // set when keep(v) said no, or with `closed` set when the gate is closed.
  template <class Keep, class Next>
  status update_slot(Keep keep, Next next, bool& refused, std::intptr_t& old) noexcept {
    for (;;) {
      refused = false;
      const status s = retry<M>([&](int index) {
        std::intptr_t* slot = &slots_[index];
        const std::intptr_t v = __atomic_load_n(slot, __ATOMIC_RELAXED);
        old = v;
        if (!keep(v)) {
          refused = true;
          return status::compare_failed;
        }
        return compare_compare_store<M>(slot, v, &gate_, 0, next(v), index);
      });
      if (s == status::committed || refused) return s;
      if (__atomic_load_n(&gate_, __ATOMIC_SEQ_CST) != 0) return status::compare_failed;
      // The slot changed between the load and the section: again.
    }
  }

  // add() after the fast section did not commit: a fold when the slot would leave its range
  // (the section's miss with the gate open), the full loop (fallback mode included) after an
  // abort or where sections cannot run, the shared count while the gate is closed.
  [[gnu::noinline, gnu::cold]] void add_cold(std::intptr_t n,
                                             detail::current_result fast) noexcept {
    detail::count_fast_attempt(detail::fast_status(fast));
    if (n < low_ || n > batch_ - 1) return add_shared(n);
    const bool open = __atomic_load_n(&gate_, __ATOMIC_RELAXED) == 0;
    if (fast == detail::current_result::miss && open) return fold(n);
    bool refused = false;
    std::intptr_t old = 0;
    if (open) {
      const status s = update_slot([&](std::intptr_t v) { return in_range(v + n, batch_ - 1); },
                                   [&](std::intptr_t v) { return v + n; }, refused, old);
      if (s == status::committed) return;
    }
    if (refused) return fold(n);
    add_shared(n);  // the gate is closed
    maybe_reopen();
  }

  // Moves the calling CPU's slot, with n, to the shared count, under the fold lock (to the
  // shared count alone when another thread holds it, or the gate is closed).
  void fold(std::intptr_t n) noexcept {
    if (!fold_begin(false)) return add_shared(n);
    std::intptr_t taken = 0;
    detail::current_result r = detail::current_gated_take<M>(slots_, &gate_, taken);
    for (int i = 0; i < kSectionRetries && r == detail::current_result::aborted; ++i)
      r = detail::current_gated_take<M>(slots_, &gate_, taken);
    if (r == detail::current_result::committed) {
      add_shared(taken + n);
    } else if (r == detail::current_result::miss) {
      add_shared(n);  // the gate is closed: the slots are empty
    } else {
      bool refused = false;  // where sections cannot run: the index-passing loop
      std::intptr_t old = 0;
      const status s = update_slot([](std::intptr_t) { return true; },
                                   [](std::intptr_t) { return std::intptr_t{0}; }, refused, old);
      add_shared(s == status::committed ? old + n : n);
    }
    fold_end();
  }

  // limited_add()'s fast path after its section did not commit: again after an abort; after a
  // full slot, once more with the slot folded (which moves value, adding none); the shared
  // count otherwise (fallback mode, the count too close to the limit, the gate closed).
  [[gnu::noinline, gnu::cold]] remote_result<bool> limited_add_cold(
      std::int64_t n, std::int64_t limit, std::intptr_t cap, detail::current_result r) noexcept {
    detail::count_fast_attempt(detail::fast_status(r));
    const auto attempt = [&] {
      return detail::current_capped_add<M>(slots_, &gate_, count_word(), cap,
                                           static_cast<std::intptr_t>(n), low_, span_);
    };
    for (int i = 0; i < kSectionRetries && r == detail::current_result::aborted; ++i) r = attempt();
    if (r == detail::current_result::committed) return {true, {}};
    if (r == detail::current_result::miss && n < batch_ &&
        __atomic_load_n(&gate_, __ATOMIC_RELAXED) == 0 && read() <= cap) {
      fold(0);  // the slot was full: empty it (moving value adds none) and try once more
      if (attempt() == detail::current_result::committed) return {true, {}};
    }
    maybe_reopen();
    return limited_add_shared(n, limit);
  }
};

}  // namespace percpu
