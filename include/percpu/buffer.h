// A bounded per-CPU buffer of pointers: a per-CPU stack of fixed capacity, pushed with a
// section that reads the count, stores the entry above it and commits the raised count; popped by
// one that reads count and top entry and commits the lowered count.
#pragma once

#define PERCPU_PUBLIC_HEADER 1  // lets it include percpu/internal/

#include "percpu/internal/config.h"  // first: the C++20 check

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <type_traits>
#include <vector>

#include "percpu/checked.h"
#include "percpu/current_ops.h"
#include "percpu/ops.h"
#include "percpu/remote.h"
#include "percpu/slot_array.h"
#include "percpu/tsan.h"

namespace percpu {

namespace detail {

/// The slow path of stack_push(): pushes `value` with full retries (and the fallback), after
/// the fast attempt did not commit (`fast`: its status for the statistics). Returns false when
/// the stack is full; waits while a remote drain has the count closed.
template <index_mode M>
[[gnu::noinline, gnu::cold]] bool stack_push_cold(arch::slot_table t, std::size_t capacity,
                                                  std::intptr_t value, status fast) noexcept {
  count_fast_attempt(fast);
  for (;;) {
    std::intptr_t* r = nullptr;
    const status s = retry<M>([&](int index) {
      r = t.words(index);
      return array_push<M>(&r[0], capacity, &r[1], value, index);
    });
    if (s == status::committed) return true;
    // Full or closed when the section ran; a count that is neither now has changed since (a
    // pop, a reopen): try again.
    const std::intptr_t n = __atomic_load_n(&r[0], __ATOMIC_RELAXED);
    if ((n & kCountClosed) != 0) {
      wait_for_remote();
    } else if (n >= static_cast<std::intptr_t>(capacity)) {
      return false;
    }
  }
}

/// Pushes `value` onto the per-index stack of `t` (each index's words: word 0 the count, words
/// 1..capacity the entries) for the calling thread's current index, in one current-index
/// section (current_array_push): the count is read inside it, the entry above the count is
/// stored (nobody reads it yet), then the count, which commits. Returns false, storing nothing,
/// when that stack is full (a count at or above `capacity`: a caller may lower the capacity of
/// a stack that holds more, as percpu malloc's adaptive capacities do); waits while a remote
/// drain has the count closed. `capacity` is at most 2^24. Async-signal-safe.
/// Under TSan the push releases `value` read as an address, and stack_pop(), stack_pop_many()
/// and the drains acquire what they take (tsan.h).
template <index_mode M>
PERCPU_ALWAYS_INLINE bool stack_push(arch::slot_table t, std::size_t capacity,
                                     std::intptr_t value) noexcept {
  tsan_release(reinterpret_cast<const void*>(value));  // TSan: hands over what `value` points to
  const current_result r = current_array_push<M>(t, capacity, value);
  if (PERCPU_LIKELY(r == current_result::committed)) return true;
  if (r == current_result::miss) return false;  // full: the common miss answers here
  return stack_push_cold<M>(t, capacity, value, fast_status(r));
}

/// What stack_pop_cold() returns: the entry, and whether there was one. Returned in two
/// registers, so the inlined fast path keeps its result out of memory.
struct stack_popped {
  std::intptr_t value;
  bool ok;
};

/// Counts at which a pop finds entries: 1 to below kCountClosed (array_pop's limit applies to
/// the count minus one; 0 and a closed count fail).
inline constexpr std::uintptr_t kPopLimit = static_cast<std::uintptr_t>(kCountClosed) - 1;

/// The slow path of stack_pop(), likewise: full retries after the fast attempt. Returns
/// {entry, true}, or {0, false} when the stack is empty.
template <index_mode M>
[[gnu::noinline, gnu::cold]] stack_popped stack_pop_cold(arch::slot_table t, status fast) noexcept {
  count_fast_attempt(fast);
  for (;;) {
    std::intptr_t* r = nullptr;
    std::intptr_t v = 0;
    const status s = retry<M>([&](int index) {
      r = t.words(index);
      return array_pop<M>(&r[0], kPopLimit, &r[1], &v, index);
    });
    if (s == status::committed) return {v, true};
    // Empty or closed when the section ran; neither now means it changed since: try again.
    const std::intptr_t n = __atomic_load_n(&r[0], __ATOMIC_RELAXED);
    if ((n & kCountClosed) != 0) {
      wait_for_remote();
    } else if (n == 0) {
      return {0, false};
    }
  }
}

/// Pops the top entry of the calling thread's stack of `t` (layout as stack_push) into `out`,
/// in one current-index section (current_array_pop) that reads the count and the entry and
/// commits the lowered count. Returns false when it is empty. Async-signal-safe.
template <index_mode M>
PERCPU_ALWAYS_INLINE bool stack_pop(arch::slot_table t, std::intptr_t& out) noexcept {
  std::intptr_t v;
  const current_result r = current_array_pop<M>(t, v);
  if (PERCPU_LIKELY(r == current_result::committed)) {
    tsan_acquire(reinterpret_cast<const void*>(v));
    out = v;
    return true;
  }
  if (r == current_result::miss) return false;  // empty: the common miss answers here
  const stack_popped p = stack_pop_cold<M>(t, fast_status(r));
  if (p.ok) {
    tsan_acquire(reinterpret_cast<const void*>(p.value));
    out = p.value;
  }
  return p.ok;
}

/// The loop of the bulk stack operations: on the calling thread's stack (words(index)), runs
/// move(r, n, k, index) with its count n and k = amount(n) entries to move, until it commits
/// (returns k) or there is nothing to move (returns 0); waits while a remote drain has the
/// count closed.
template <index_mode M, class Words, class Amount, class Move>
std::size_t stack_move_many(Words&& words, Amount&& amount, Move&& move) noexcept {
  for (;;) {
    bool closed = false;
    std::size_t k = 0;
    const status s = retry<M>([&](int index) {
      std::intptr_t* r = words(index);
      const std::intptr_t n = __atomic_load_n(&r[0], __ATOMIC_RELAXED);
      closed = (n & kCountClosed) != 0;
      k = closed ? 0 : amount(static_cast<std::size_t>(n));
      if (k == 0) return status::compare_failed;
      return move(r, n, static_cast<std::intptr_t>(k), index);
    });
    if (s == status::committed) return k;
    if (!closed) return 0;
    wait_for_remote();
  }
}

/// Pops up to `want` entries of the calling thread's stack (layout as stack_push) into `out`,
/// top first, in one critical section that copies them and commits the lowered count. Returns
/// how many it popped (0 when empty). Async-signal-safe.
template <index_mode M, class Words>
std::size_t stack_pop_many(Words&& words, std::intptr_t* out, std::size_t want) noexcept {
  const std::size_t popped = stack_move_many<M>(
      words, [&](std::size_t n) { return std::min(n, want); },
      [&](std::intptr_t* r, std::intptr_t n, std::intptr_t k, int index) {
        // The copy runs inside the section: a preemption, migration or signal aborts it, so
        // the entries copied are the ones the committed count gives up.
        return compare_memcpy_store<M>(&r[0], n, out, &r[n - k + 1],
                                       static_cast<std::size_t>(k) * sizeof(std::intptr_t), n - k,
                                       index);
      });
  tsan_acquire_each(out, popped);
  return popped;
}

/// Pushes as many of the `count` entries at `values` as fit onto the calling thread's stack, in
/// one critical section (entries above the count first, then the count). Returns how many it
/// pushed (values[0, result)). Async-signal-safe.
template <index_mode M, class Words>
std::size_t stack_push_many(Words&& words, std::size_t capacity, const std::intptr_t* values,
                            std::size_t count) noexcept {
  // TSan: all `count` are released, the ones that do not fit too (the caller keeps those).
  tsan_release_each(values, count);
  return stack_move_many<M>(
      words, [&](std::size_t n) { return n >= capacity ? 0 : std::min(capacity - n, count); },
      [&](std::intptr_t* r, std::intptr_t n, std::intptr_t k, int index) {
        return compare_memcpy_store<M, commit_order::release>(
            &r[0], n, &r[n + 1], values, static_cast<std::size_t>(k) * sizeof(std::intptr_t), n + k,
            index);
      });
}

}  // namespace detail

/// Per-CPU (or per-mm_cid, M) bounded LIFO of non-null pointers P (for example `item*`), with
/// `capacity` entries per index. Each index's count and entries share one region starting on its
/// own cache line; regions are sized by the index space of M.
///
/// - push() and pop() act on the calling thread's current index, one critical section each,
///   and are async-signal-safe. A full or empty buffer is reported, never waited for.
/// - drain(index) empties any index's buffer while threads keep using it.
/// - In fallback mode the same operations give the same results.
/// - Checked (default: debug builds) records which pointers are stored, so a double push throws.
/// - Under ThreadSanitizer (tsan.h) a push happens before the pop or drain that takes the same
///   pointer, keyed on the address stored: the pointers must then point into the program's
///   memory (an object, not a tagged or made-up value).
template <class P, index_mode M = index_mode::cpu_id, bool Checked = kCheckedDefault>
class buffer {
  static_assert(std::is_pointer_v<P>, "percpu::buffer<P>: P must be a pointer type, e.g. item*");

 public:
  /// Most entries a buffer may have per index.
  static constexpr std::size_t kMaxCapacity = std::size_t{1} << 24;

  /// Reserves `capacity` entries (1 .. kMaxCapacity) for each index.
  /// Throws std::invalid_argument for a capacity out of range, std::bad_alloc without memory.
  explicit buffer(std::size_t capacity)
      : capacity_(checked_capacity(capacity)),
        regions_(index_space<M>(), (1 + capacity_) * sizeof(std::intptr_t)) {}

  /// The same, with each index's count and entries in one object of `from` (which must outlive
  /// the buffer): (1 + capacity) x 8 bytes, at most the pool's stride, else
  /// std::invalid_argument.
  buffer(std::size_t capacity, pool<M>& from)
      : capacity_(checked_capacity(capacity)),
        regions_(index_space<M>(), (1 + capacity_) * sizeof(std::intptr_t), from) {}

  ~buffer() {
    if constexpr (Checked) {
      for (int i = 0; i < regions_.size(); ++i) {
        const std::intptr_t* r = words(i);
        for (std::intptr_t k = 1; k <= r[0]; ++k) detail::checked_erase(reinterpret_cast<P>(r[k]));
      }
    }
  }
  buffer(const buffer&) = delete;
  buffer& operator=(const buffer&) = delete;

  /// Pushes `p` onto the calling thread's buffer. Returns false, storing nothing, when that
  /// buffer is full. Throws std::invalid_argument for a null pointer and (Checked)
  /// std::logic_error for a pointer already stored; nothing changes then either.
  PERCPU_ALWAYS_INLINE bool push(P p) {
    if (PERCPU_UNLIKELY(p == nullptr)) throw_null_pointer();
    if constexpr (Checked) {
      if (!detail::checked_insert(p)) throw_double_push();
    }
    if (detail::stack_push<M>(regions_.table(), capacity_, reinterpret_cast<std::intptr_t>(p)))
      return true;
    if constexpr (Checked) detail::checked_erase(p);
    return false;
  }

  /// Pops the most recently pushed pointer of the calling thread's buffer; nullptr when empty.
  PERCPU_ALWAYS_INLINE P pop() noexcept {
    std::intptr_t p = 0;
    if (!detail::stack_pop<M>(regions_.table(), p)) return nullptr;
    if constexpr (Checked) detail::checked_erase(reinterpret_cast<P>(p));
    return reinterpret_cast<P>(p);
  }

  /// Empties the buffer of `index` (any index), also while threads use it, and returns its
  /// pointers, oldest first, or the error remote_errc::no_fence when no fence is possible
  /// (try_fence_index()); nothing changes then. Not async-signal-safe (allocates the vector).
  /// Throws std::out_of_range for an index outside [0, slots()), std::bad_alloc (before the
  /// buffer is closed: nothing changes then either). The buffer is reopened on every exit,
  /// an exception or the unwinding of a cancelled thread included (it is closed only while
  /// cancellation is disabled, and nothing that can throw runs while it is closed).
  remote_result<std::vector<P>> try_drain(int index) {
    std::intptr_t* r = reinterpret_cast<std::intptr_t*>(regions_.at(index));
    remote_result<std::vector<P>> out;
    // Allocate before closing (others wait while it is closed), and never while closed: a
    // buffer that grew past the reservation meanwhile is reopened as it was and the drain
    // starts over with room for it.
    std::size_t room = std::min(size(index) + 16, capacity_);
    for (;;) {
      out.value.reserve(room);
      detail::remote_section remote;
      std::intptr_t n = 0;
      if ((out.error = detail::try_close_count<M>(&r[0], index, n))) return out;
      detail::reopen_on_exit reopen(&r[0], n);  // unchanged, unless the copy below completes
      if (static_cast<std::size_t>(n) > out.value.capacity()) {
        room = static_cast<std::size_t>(n);
        continue;
      }
      for (std::intptr_t k = 1; k <= n; ++k) {
        detail::tsan_acquire(reinterpret_cast<const void*>(r[k]));
        out.value.push_back(reinterpret_cast<P>(r[k]));
      }
      reopen.reopen_with(0);  // reopens, empty
      break;
    }
    if constexpr (Checked) {
      for (P p : out.value) detail::checked_erase(p);
    }
    return out;
  }

  /// try_drain(), throwing std::system_error (remote_errc::no_fence) when no fence is possible.
  std::vector<P> drain(int index) {
    remote_result<std::vector<P>> r = try_drain(index);
    if (r.error) throw std::system_error(r.error, "percpu::buffer::drain");
    return std::move(r.value);
  }

  /// Entries per index.
  std::size_t capacity() const noexcept { return capacity_; }

  /// Number of buffers (the index space of M).
  int slots() const noexcept { return regions_.size(); }

  /// Current count of `index` (a snapshot). Throws std::out_of_range for a bad index.
  std::size_t size(int index) const {
    const auto n =
        __atomic_load_n(reinterpret_cast<std::intptr_t*>(regions_.at(index)), __ATOMIC_ACQUIRE);
    return static_cast<std::size_t>(n & ~detail::kCountClosed);
  }

 private:
  [[noreturn, gnu::noinline, gnu::cold]] static void throw_null_pointer() {
    throw std::invalid_argument("percpu::buffer::push: null pointer");
  }
  [[noreturn, gnu::noinline, gnu::cold]] static void throw_double_push() {
    throw std::logic_error("percpu::buffer::push: pointer is already stored (double push)");
  }
  static std::size_t checked_capacity(std::size_t capacity) {
    if (capacity == 0 || capacity > kMaxCapacity)
      throw std::invalid_argument("percpu::buffer: capacity " + std::to_string(capacity) +
                                  " outside [1, " + std::to_string(kMaxCapacity) + "]");
    return capacity;
  }

  // Region of `index`: word 0 is the count, words 1..capacity the entries.
  std::intptr_t* words(int index) const noexcept {
    return reinterpret_cast<std::intptr_t*>(regions_[index]);
  }

  std::size_t capacity_;
  region_array regions_;
};

}  // namespace percpu
