// A per-CPU counter: increments go to the calling thread's slot with one rseq add (no atomic
// instruction, no shared cache line); reading sums the slots.
#pragma once

#define PERCPU_PUBLIC_HEADER 1  // lets it include percpu/internal/

#include "percpu/internal/config.h"  // first: the C++20 check

#include <cstdint>
#include <limits>
#include <type_traits>

#include "percpu/current_ops.h"
#include "percpu/ops.h"
#include "percpu/slot_array.h"

namespace percpu {

/// Counter of integral type T (at most 64 bits), indexed by cpu_id or mm_cid (M).
///
/// add() and sub() cost one critical section (about 1 ns in rseq mode), are async-signal-safe,
/// and never lose an update, also across preemption, migration and signals. load() sums the
/// slots: it sees every update that completed before it started. Arithmetic wraps like T's
/// unsigned counterpart (individual slots may go "negative" after sub() or reset()).
template <class T = std::int64_t, index_mode M = index_mode::cpu_id>
class counter {
  static_assert(std::is_integral_v<T> && sizeof(T) <= sizeof(std::intptr_t),
                "counter<T>: T must be an integral type of at most 64 bits");

 public:
  /// A zero counter with slots of its own (one cache line per index).
  counter() : slots_(index_space<M>()) {}

  /// A zero counter whose slots are one 8-byte object of `from` (which must outlive it): many
  /// counters then share each index's cache lines and pages. Throws as slot_array's pool
  /// constructor.
  explicit counter(pool<M>& from) : slots_(index_space<M>(), from) {}

  /// Adds `n` to the calling thread's slot.
  PERCPU_ALWAYS_INLINE void add(T n) noexcept {
    const auto delta = static_cast<std::intptr_t>(n);
    const detail::current_result r = detail::current_add<M>(slots_, delta);
    if (PERCPU_LIKELY(r == detail::current_result::committed)) return;
    add_cold(delta, detail::fast_status(r));
  }

  /// Subtracts `n` (adds its two's complement).
  void sub(T n) noexcept { add(static_cast<T>(-static_cast<std::make_unsigned_t<T>>(n))); }

  /// Sum of all slots.
  T load() const noexcept {
    std::uintptr_t sum = 0;
    for (int i = 0; i < slots_.size(); ++i)
      sum += static_cast<std::uintptr_t>(__atomic_load_n(&slots_[i], __ATOMIC_RELAXED));
    return static_cast<T>(sum);
  }

  /// The value of one slot (its share of the sum). Throws std::out_of_range for an index
  /// outside the index space.
  T slot(int index) const {
    return static_cast<T>(__atomic_load_n(&slots_.at(index), __ATOMIC_RELAXED));
  }

  /// Returns the sum and subtracts exactly that from the counter, so an increment that runs
  /// concurrently is either in the returned value or stays in the counter: none is lost.
  /// (It subtracts through the calling thread's own slot; only the sum is meaningful.)
  T reset() noexcept {
    const T taken = load();
    sub(taken);
    return taken;
  }

  /// Number of slots (the index space of M).
  int slots() const noexcept { return slots_.size(); }

  /// Where the slots are: index i's word at base + i * stride. For code that runs its own
  /// sections on them (the C API's inline add, <percpu.h>); the layout is fixed for the
  /// counter's life.
  detail::slot_table table() const noexcept { return slots_.table(); }

 private:
  // add() after its one fast attempt did not commit: the full loop, fallback mode included.
  [[gnu::noinline, gnu::cold]] void add_cold(std::intptr_t delta, status fast) noexcept {
    detail::count_fast_attempt(fast);
    retry<M>([this, delta](int index) { return percpu::add<M>(&slots_[index], delta, index); });
  }

  slot_array<std::intptr_t> slots_;
};

}  // namespace percpu
