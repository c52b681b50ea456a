// histogram: a per-CPU histogram of unsigned 64-bit values (latencies, sizes). record() is a few
// critical sections on the calling CPU's buckets; snapshot() gives a consistent copy without
// stopping the recorders; snapshot_and_reset() empties it without losing a record.
#pragma once

#define PERCPU_PUBLIC_HEADER 1  // lets it include percpu/internal/

#include "percpu/internal/config.h"  // first: the C++20 check

#include <sched.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <system_error>

#include "percpu/current_ops.h"
#include "percpu/histogram_layout.h"
#include "percpu/histogram_snapshot.h"
#include "percpu/ops.h"
#include "percpu/slot_array.h"

namespace percpu {

namespace detail {

/// The part of histogram that does not depend on the index mode: the per-CPU banks' memory, the
/// snapshot's flip and drain, the fork() stage, compiled in the library (histogram.cpp).
///
/// Memory: each index has two banks of words (kEntered, kSum, kAbove, then one per bucket); the
/// recorders write the hot bank, hot_ names it. A snapshot makes the other bank hot, closes the
/// old one's gate, fences every CPU (try_fence_all()) so that no record can still enter it,
/// waits until the records inside it have left (its kEntered words sum to zero), and folds it
/// into the accumulated snapshot, zeroing it.
class histogram_core {
 public:
  histogram_core(const histogram_core&) = delete;
  histogram_core& operator=(const histogram_core&) = delete;

  const histogram_layout& layout() const noexcept { return layout_; }

  /// The fork() stage (histogram.cpp): flips every histogram, fences once, waits until no
  /// record is inside an old bank; both processes fold the old banks, the child drops the new.
  void fork_flip() noexcept;
  void fork_wait() noexcept;
  void fork_parent(bool fenced) noexcept;
  void fork_child() noexcept;

  /// Word offsets in a bank.
  static constexpr std::size_t kEntered = 0, kSum = 1, kAbove = 2, kBucket0 = 3;

 protected:
  PERCPU_API histogram_core(int slots, const histogram_layout& layout);
  PERCPU_API ~histogram_core();

  /// Copies the records so far into `out` (taking or resetting them when `reset`).
  PERCPU_API std::error_code collect(histogram_snapshot& out, bool reset);

  /// The slots of word w of bank b (slot i at base + i * stride).
  PERCPU_ALWAYS_INLINE detail::slot_table table(int b, std::size_t w) const noexcept {
    return {base_ + (static_cast<std::uintptr_t>(b) * bank_words_ + w) * sizeof(std::intptr_t),
            stride_};
  }

  const histogram_layout layout_;
  const int slots_;
  const std::size_t bank_words_;  // kBucket0 + buckets
  const std::uintptr_t stride_;   // bytes per index: both banks, rounded up to 64
  std::uintptr_t base_ = 0;       // slots_ * stride_ bytes, its own mapping
  // Read by every record: the hot bank, and each bank's gate (0 open, 1 closed).
  alignas(64) int hot_ = 0;
  std::intptr_t gate_[2] = {0, 1};

 private:
  std::intptr_t entered(int bank) const noexcept;
  void wait_until_left(int bank) const noexcept;
  void take_bank(int bank, bool keep);

  alignas(64) std::mutex mutex_;  // snapshots, one at a time
  histogram_snapshot total_;      // the banks folded so far, under mutex_
  bool unfolded_[2] = {};         // a closed bank that still holds records (no fence), mutex_

 public:  // the registry's links (histogram.cpp), under its mutex
  histogram_core* next_ = nullptr;
  histogram_core* prev_ = nullptr;
};

}  // namespace detail

/// A per-CPU histogram of std::uint64_t values, indexed by cpu_id or mm_cid (M), with
/// HdrHistogram's log-linear buckets (histogram_layout: precision and range chosen at
/// construction).
///
/// record(v) is four critical sections on the calling CPU (mark the bank entered, count the
/// bucket, add v to the sum, mark it left), no shared cache line and no atomic
/// read-modify-write: its cost does not grow with the threads that record at once.
///
/// snapshot() returns every record that completed before it began and none that began after
/// it ended, consistently: its count() is the sum of its buckets and its sum() the sum of
/// exactly those records' values. It does not stop the recorders: it makes the other bank hot,
/// fences every CPU (try_fence_all(): one membarrier system call), waits until the records
/// already inside the old bank have left (nanoseconds each), and folds the old bank into the
/// running total. snapshot_and_reset() does the same and empties the total: every record lands
/// in exactly one of the snapshots it returns or in a later one, none is lost or counted twice.
///
/// Errors: snapshot() and snapshot_and_reset() throw std::system_error (remote_errc::no_fence)
/// when no fence is possible (see try_fence_all()); nothing is lost then (the records stay for
/// the next snapshot). The _or_error forms return the code instead. std::bad_alloc from the
/// copy they return. Constructors: std::invalid_argument from a bad layout, std::bad_alloc.
///
/// Thread and signal safety: record() from any thread, and async-signal-safe (sections only;
/// in fallback mode, fallback's stripes with signals blocked); it never waits for another
/// thread. Snapshots from any thread, one at a time (others wait on a mutex), not from a signal
/// handler that interrupted a record() or a snapshot on its own thread (it would wait for
/// itself); no cancellation point. fork(): a snapshot in progress finishes before the copy (a
/// fork window); the fork flips every histogram as a snapshot does and waits until the records
/// inside the old banks have left, so the child's histogram holds every record that completed
/// before the fork began, none half done, and is usable (the records that ran during the fork
/// are the parent's only). Not fork() from a signal handler that interrupted a record() (the
/// fork would wait for it). A thread that dies inside record() (a signal handler that exits
/// it) leaves snapshots and forks waiting forever.
///
/// Memory: 2 * (buckets + 3) words per index (two banks), in a mapping of its own whose
/// untouched pages stay unpopulated: a CPU that records few distinct values costs few pages.
template <index_mode M = index_mode::cpu_id>
class histogram : private detail::histogram_core {
 public:
  /// An empty histogram with `layout`'s buckets. Throws std::bad_alloc without address space.
  explicit histogram(const histogram_layout& layout = {})
      : histogram_core(index_space<M>(), layout) {}

  /// Records v (v above layout().max_value(): counted in the last bucket and as above range,
  /// its own value in the sum).
  PERCPU_ALWAYS_INLINE void record(std::uint64_t v) noexcept {
    // Both from the layout before the sections (whose memory clobbers would make it reload).
    const std::size_t i = layout_.index_of(v);
    const bool above = v > layout_.max_value();
    int b = __atomic_load_n(&hot_, __ATOMIC_ACQUIRE);
    const detail::current_result r = detail::current_gated_add<M>(table(b, kEntered), &gate_[b], 1);
    if (PERCPU_UNLIKELY(r != detail::current_result::committed)) b = enter_cold(r);
    add_word(table(b, kBucket0 + i), 1);
    add_word(table(b, kSum), static_cast<std::intptr_t>(v));
    if (PERCPU_UNLIKELY(above)) add_word(table(b, kAbove), 1);
    // The bank's words are written before the record is seen to leave (a no-op on x86-64).
    std::atomic_thread_fence(std::memory_order_release);
    add_word(table(b, kEntered), -1);
  }

  /// The records so far (see the class comment). Throws std::system_error (no_fence).
  histogram_snapshot snapshot() {
    histogram_snapshot s(layout_);
    if (const std::error_code e = collect(s, false))
      throw std::system_error(e, "percpu::histogram::snapshot");
    return s;
  }

  /// The records so far, leaving the histogram empty; no record is lost (each is in this
  /// snapshot or a later one). Throws std::system_error (no_fence), nothing changed.
  histogram_snapshot snapshot_and_reset() {
    histogram_snapshot s(layout_);
    if (const std::error_code e = collect(s, true))
      throw std::system_error(e, "percpu::histogram::snapshot_and_reset");
    return s;
  }

  /// snapshot() into `out` (its layout becomes this one's), returning the error instead of
  /// throwing; `out` is unchanged on error. std::bad_alloc may still be thrown.
  std::error_code snapshot_or_error(histogram_snapshot& out) { return collect(out, false); }
  /// snapshot_and_reset() into `out`, returning the error instead of throwing.
  std::error_code snapshot_and_reset_or_error(histogram_snapshot& out) {
    return collect(out, true);
  }

  /// Empties it (snapshot_and_reset(), dropping the snapshot).
  void reset() { (void)snapshot_and_reset(); }

  using histogram_core::layout;

  /// Number of slots per bank (the index space of M).
  int slots() const noexcept { return slots_; }

 private:
  static constexpr int kSectionRetries = 8;

  // One add to the calling CPU's slot of `t`, through the full loop when the section cannot
  // serve (an abort, fallback mode).
  PERCPU_ALWAYS_INLINE void add_word(detail::slot_table t, std::intptr_t n) noexcept {
    const detail::current_result r = detail::current_add<M>(t, n);
    if (PERCPU_UNLIKELY(r != detail::current_result::committed)) add_cold(t, n, r);
  }
  [[gnu::noinline, gnu::cold]] void add_cold(detail::slot_table t, std::intptr_t n,
                                             detail::current_result fast) noexcept {
    detail::count_fast_attempt(detail::fast_status(fast));
    retry<M>([t, n](int index) { return percpu::add<M>(t.words(index), n, index); });
  }

  // The entry after the fast section did not commit: again after an abort; the hot bank again
  // after a flip (a snapshot's or a fork's) closed the one read; the full loop where sections
  // cannot run (fallback mode). Returns the bank entered.
  [[gnu::noinline, gnu::cold]] int enter_cold(detail::current_result r) noexcept {
    detail::count_fast_attempt(detail::fast_status(r));
    for (int round = 0;; ++round) {
      const int b = __atomic_load_n(&hot_, __ATOMIC_ACQUIRE);
      r = detail::current_gated_add<M>(table(b, kEntered), &gate_[b], 1);
      for (int i = 0; i < kSectionRetries && r == detail::current_result::aborted; ++i)
        r = detail::current_gated_add<M>(table(b, kEntered), &gate_[b], 1);
      if (r == detail::current_result::committed) return b;
      if (r != detail::current_result::miss) {
        const detail::slot_table t = table(b, kEntered);
        const status s = retry<M>([this, t, b](int index) {
          std::intptr_t* slot = t.words(index);
          const std::intptr_t n = __atomic_load_n(slot, __ATOMIC_RELAXED);
          return compare_compare_store<M>(slot, n, &gate_[b], 0, n + 1, index);
        });
        if (s == status::committed) return b;
      }
      // The gate of bank b closed: a flip made the other bank hot (open). Yield only when flips
      // keep coming faster than this thread runs.
      if (round >= 2) sched_yield();
    }
  }
};

}  // namespace percpu
