// A bounded per-CPU buffer of trivially copyable records, copied in and out inside the critical
// section (compare, copy, then store the count).
#pragma once

#define PERCPU_PUBLIC_HEADER 1  // lets it include percpu/internal/

#include "percpu/internal/config.h"  // first: the C++20 check

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "percpu/current_ops.h"
#include "percpu/ops.h"
#include "percpu/remote.h"
#include "percpu/slot_array.h"
#include "percpu/tsan.h"

namespace percpu {

/// Per-CPU (or per-mm_cid, M) bounded LIFO of records T (trivially copyable), `capacity` per
/// index. Records are copied with 8-byte moves (then a 0-7 byte tail) inside one critical section
/// per push or pop; keep T small (up to a few hundred bytes), since a copy that outlasts a
/// scheduler tick keeps aborting.
///
/// - push() and pop() act on the calling thread's current index and are async-signal-safe; a
///   full or empty buffer is reported, never waited for.
/// - drain(index) empties any index's buffer while threads keep using it.
/// - In fallback mode the same operations give the same results.
/// - Under ThreadSanitizer (tsan.h) a push happens before every later pop and drain of the
///   buffer, keyed on the buffer itself (a record has no address of its own that both sides
///   know), so objects that records point to are handed over as through a mutex.
template <class T, index_mode M = index_mode::cpu_id>
class memcpy_buffer {
  static_assert(std::is_trivially_copyable_v<T>, "percpu::memcpy_buffer<T>: T is copied as bytes");

 public:
  /// Most records a buffer may hold per index.
  static constexpr std::size_t kMaxCapacity = std::size_t{1} << 20;
  /// Bytes between records: sizeof(T) rounded up to 8, so each record starts word-aligned.
  static constexpr std::size_t kRecordStride = (sizeof(T) + 7) / 8 * 8;

  /// Reserves `capacity` records (1 .. kMaxCapacity) for each index.
  /// Throws std::invalid_argument for a capacity out of range, std::bad_alloc without memory.
  explicit memcpy_buffer(std::size_t capacity)
      : capacity_(checked_capacity(capacity)),
        regions_(index_space<M>(), sizeof(std::intptr_t) + capacity_ * kRecordStride) {}

  /// The same, with each index's count and records in one object of `from` (which must outlive
  /// the buffer), at most the pool's stride, else std::invalid_argument.
  memcpy_buffer(std::size_t capacity, pool<M>& from)
      : capacity_(checked_capacity(capacity)),
        regions_(index_space<M>(), sizeof(std::intptr_t) + capacity_ * kRecordStride, from) {}

  /// Copies `record` into the calling thread's buffer. Returns false, storing nothing, when it
  /// is full.
  PERCPU_ALWAYS_INLINE bool push(const T& record) noexcept {
    detail::tsan_release(this);
    const detail::current_result r = detail::current_memcpy_push<M, kRecordStride>(
        regions_.table(), capacity_, &record, sizeof(T));
    if (PERCPU_LIKELY(r == detail::current_result::committed)) return true;
    if (r == detail::current_result::miss) return false;  // full
    return push_cold(record, detail::fast_status(r));
  }

  /// Copies the most recently pushed record of the calling thread's buffer into `out` and
  /// removes it. Returns false, leaving `out` unspecified, when the buffer is empty.
  PERCPU_ALWAYS_INLINE bool pop(T& out) noexcept {
    const detail::current_result r =
        detail::current_memcpy_pop<M, kRecordStride>(regions_.table(), &out, sizeof(T));
    if (PERCPU_LIKELY(r == detail::current_result::committed)) {
      detail::tsan_acquire(this);
      return true;
    }
    if (r == detail::current_result::miss) return false;  // empty
    const bool popped = pop_cold(out, detail::fast_status(r));
    if (popped) detail::tsan_acquire(this);
    return popped;
  }

  /// pop() returning the record, or std::nullopt when the buffer is empty.
  std::optional<T> pop() noexcept {
    T record;
    if (pop(record)) return record;
    return std::nullopt;
  }

  /// Empties the buffer of `index` (any index), also while threads use it, and returns its
  /// records, oldest first, or the error remote_errc::no_fence when no fence is possible
  /// (try_fence_index()); nothing changes then. Not async-signal-safe. Throws
  /// std::out_of_range for an index outside [0, slots()), std::bad_alloc (before the buffer is
  /// closed: nothing changes then either). The buffer is reopened on every exit, an exception
  /// or the unwinding of a cancelled thread included.
  remote_result<std::vector<T>> try_drain(int index) {
    regions_.at(index);
    remote_result<std::vector<T>> out;
    // Allocate before closing (others wait while it is closed), and never while closed: a
    // buffer that grew past the reservation meanwhile is reopened as it was and the drain
    // starts over with room for it.
    std::size_t room = std::min(size(index) + 16, capacity_);
    for (;;) {
      out.value.reserve(room);
      detail::remote_section remote;
      std::intptr_t n = 0;
      if ((out.error = detail::try_close_count<M>(count_of(index), index, n))) return out;
      detail::reopen_on_exit reopen(count_of(index), n);  // unchanged, unless the copy completes
      if (static_cast<std::size_t>(n) > out.value.capacity()) {
        room = static_cast<std::size_t>(n);
        continue;
      }
      for (std::intptr_t k = 0; k < n; ++k) {
        T record;
        std::memcpy(&record, record_of(index, k), sizeof(T));
        out.value.push_back(record);
      }
      reopen.reopen_with(0);  // reopens, empty
      break;
    }
    detail::tsan_acquire(this);
    return out;
  }

  /// try_drain(), throwing std::system_error (remote_errc::no_fence) when no fence is possible.
  std::vector<T> drain(int index) {
    remote_result<std::vector<T>> r = try_drain(index);
    if (r.error) throw std::system_error(r.error, "percpu::memcpy_buffer::drain");
    return std::move(r.value);
  }

  /// Records per index.
  std::size_t capacity() const noexcept { return capacity_; }

  /// Number of buffers (the index space of M).
  int slots() const noexcept { return regions_.size(); }

  /// Current count of `index` (a snapshot). Throws std::out_of_range for a bad index.
  std::size_t size(int index) const {
    regions_.at(index);
    const auto n = __atomic_load_n(count_of(index), __ATOMIC_ACQUIRE);
    return static_cast<std::size_t>(n & ~detail::kCountClosed);
  }

 private:
  static std::size_t checked_capacity(std::size_t capacity) {
    if (capacity == 0 || capacity > kMaxCapacity)
      throw std::invalid_argument("percpu::memcpy_buffer: capacity " + std::to_string(capacity) +
                                  " outside [1, " + std::to_string(kMaxCapacity) + "]");
    return capacity;
  }

  // One attempt of push() and pop() on `index`, for the loops below (fallback mode included);
  // `n` is the count it read. A full, empty or closed buffer (kCountClosed set: above every
  // capacity) is compare_failed without a section.
  PERCPU_ALWAYS_INLINE status push_attempt(const T& record, int index, std::intptr_t& n) noexcept {
    std::intptr_t* count = count_of(index);
    n = __atomic_load_n(count, __ATOMIC_RELAXED);
    if (n >= static_cast<std::intptr_t>(capacity_)) return status::compare_failed;
    // Record n is above the count: nobody reads it until the count store publishes it.
    return compare_memcpy_store<M, commit_order::release>(count, n, record_of(index, n), &record,
                                                          sizeof(T), n + 1, index);
  }
  PERCPU_ALWAYS_INLINE status pop_attempt(T& out, int index, std::intptr_t& n) noexcept {
    std::intptr_t* count = count_of(index);
    n = __atomic_load_n(count, __ATOMIC_RELAXED);
    if (static_cast<std::uintptr_t>(n - 1) >= static_cast<std::uintptr_t>(detail::kCountClosed - 1))
      return status::compare_failed;
    // The copy into `out` may happen in attempts that abort; only the count store commits.
    return compare_memcpy_store<M, commit_order::relaxed>(count, n, &out, record_of(index, n - 1),
                                                          sizeof(T), n - 1, index);
  }

  // push() and pop() after their one fast attempt did not commit (full, empty, closed, an
  // abort, fallback mode): the full loops.
  [[gnu::noinline, gnu::cold]] bool push_cold(const T& record, status fast) noexcept {
    detail::count_fast_attempt(fast);
    for (;;) {
      std::intptr_t n = 0;
      const status s = retry<M>([&](int index) { return push_attempt(record, index, n); });
      if (s == status::committed) return true;
      if ((n & detail::kCountClosed) != 0) {
        detail::wait_for_remote();
      } else if (n >= static_cast<std::intptr_t>(capacity_)) {
        return false;  // full
      }
    }
  }

  [[gnu::noinline, gnu::cold]] bool pop_cold(T& out, status fast) noexcept {
    detail::count_fast_attempt(fast);
    for (;;) {
      std::intptr_t n = 0;
      const status s = retry<M>([&](int index) { return pop_attempt(out, index, n); });
      if (s == status::committed) return true;
      if ((n & detail::kCountClosed) != 0) {
        detail::wait_for_remote();
      } else if (n == 0) {
        return false;  // empty
      }
    }
  }

  // Region of `index`: the count word, then capacity records of kRecordStride bytes.
  std::intptr_t* count_of(int index) const noexcept {
    return reinterpret_cast<std::intptr_t*>(regions_[index]);
  }
  void* record_of(int index, std::intptr_t k) const noexcept {
    return regions_[index] + sizeof(std::intptr_t) + static_cast<std::size_t>(k) * kRecordStride;
  }

  std::size_t capacity_;
  region_array regions_;
};

}  // namespace percpu
