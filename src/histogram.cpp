// histogram's shared side: the banks' memory, the snapshot's flip, fence, drain and fold, and
// the fork() stage (percpu/histogram.h says the contract).
#include "percpu/histogram.h"

#include <sched.h>
#include <sys/mman.h>

#include <optional>

#include "fork_order.h"
#include "fork_window.h"
#include "intrusive_registry.h"
#include "percpu/remote.h"

namespace percpu::detail {
namespace {

// Every histogram of the process. fork() flips each one as a snapshot does (the other bank
// hot, the old one closed), fences once and waits until no record is inside an old bank: those
// hold every record that completed before the fork began, none half done. The records that
// run meanwhile go to the new banks and never wait (a signal handler's record that interrupted
// one in an old bank finishes first, in a new bank). After the fork both processes fold the
// old banks into their totals (so the closed bank is empty again, as snapshots expect); the
// child also empties the new banks, where a record may have been copied half done: the records
// that ran during the fork are the parent's only.
constinit intrusive_registry<histogram_core> g_registry;
bool g_fork_fenced = false;  // under the registry's lock

void flip_for_fork() {
  g_registry.lock();
  bool any = false;
  g_registry.for_each([&](histogram_core& h) {
    h.fork_flip();
    any = true;
  });
  if (!any) return;
  // Without a fence the waits below still see every record that entered an old bank before
  // its gate closed, but may miss one whose section committed just after (see fork_parent()).
  g_fork_fenced = !try_fence_all();
  g_registry.for_each([](histogram_core& h) { h.fork_wait(); });
}
void after_fork_in_parent() {
  g_registry.for_each([](histogram_core& h) { h.fork_parent(g_fork_fenced); });
  g_registry.unlock();
}
void after_fork_in_child() {
  g_registry.for_each([](histogram_core& h) { h.fork_child(); });
  g_registry.unlock();
}

__attribute__((constructor)) void register_fork_handlers() {
  set_fork_handlers(fork_stage::histograms, flip_for_fork, after_fork_in_parent,
                    after_fork_in_child);
}

std::uintptr_t bank_stride(std::size_t bank_words) {
  return (2 * bank_words * sizeof(std::intptr_t) + 63) / 64 * 64;
}

void spin_or_yield(int& spins) noexcept {
  if (++spins < 64) {
    PERCPU_CPU_RELAX();
  } else {
    sched_yield();
  }
}

}  // namespace

histogram_core::histogram_core(int slots, const histogram_layout& layout)
    : layout_(layout),
      slots_(slots),
      bank_words_(kBucket0 + layout.bucket_count()),
      stride_(bank_stride(bank_words_)),
      total_(layout) {
  // Mapped after total_'s allocation, so that neither leaks when the other throws.
  base_ = reinterpret_cast<std::uintptr_t>(map_zeroed(static_cast<std::size_t>(slots) * stride_));
  g_registry.add(this);
}

histogram_core::~histogram_core() {
  g_registry.remove(this);
  munmap(reinterpret_cast<void*>(base_), static_cast<std::size_t>(slots_) * stride_);
}

std::intptr_t histogram_core::entered(int bank) const noexcept {
  const slot_table t = table(bank, kEntered);
  std::uintptr_t sum = 0;
  for (int i = 0; i < slots_; ++i)
    sum += static_cast<std::uintptr_t>(__atomic_load_n(t.words(i), __ATOMIC_RELAXED));
  return static_cast<std::intptr_t>(sum);
}

// After the bank's gate closed and a fence: no record enters it any more, and every one that
// entered before is counted in its kEntered words, so their sum only falls, to zero.
void histogram_core::wait_until_left(int bank) const noexcept {
  int spins = 0;
  while (entered(bank) != 0) spin_or_yield(spins);
  // What the records wrote before they left (their release fence) is seen from here on.
  std::atomic_thread_fence(std::memory_order_acquire);
}

// Empties a quiescent bank, adding its records to total_ when `keep` (a fork's child drops
// the bank its records went to during the fork). Only words that are not zero are written: a
// page no record touched is read, never written, so it stays unpopulated.
void histogram_core::take_bank(int bank, bool keep) {
  const std::uintptr_t first =
      base_ + static_cast<std::uintptr_t>(bank) * bank_words_ * sizeof(std::intptr_t);
  for (int i = 0; i < slots_; ++i) {
    auto* w = reinterpret_cast<std::intptr_t*>(first + static_cast<std::uintptr_t>(i) * stride_);
    for (std::size_t k = 0; k < bank_words_; ++k) {
      const std::intptr_t n = w[k];
      if (n == 0) continue;
      w[k] = 0;
      if (!keep) continue;
      // kEntered: the words sum to zero (one index's may not: a record that migrated).
      if (k == kSum) {
        total_.add_sum(static_cast<std::uint64_t>(n));
      } else if (k == kAbove) {
        total_.add_above_range(static_cast<std::uint64_t>(n));
      } else if (k >= kBucket0) {
        total_.fold_bucket(k - kBucket0, static_cast<std::uint64_t>(n));
      }
    }
  }
}

std::error_code histogram_core::collect(histogram_snapshot& out, bool reset) {
  // The reset's empty total, allocated before anything changes (std::bad_alloc loses nothing).
  std::optional<histogram_snapshot> fresh;
  if (reset) fresh.emplace(layout_);
  // A fork() copies the banks before the flip or after the fold, never between.
  const fork_window no_fork;
  const std::lock_guard<std::mutex> hold(mutex_);
  const int old = hot_, next = 1 - old;
  // The closed bank still holds records when an earlier flip could not fence (a snapshot's or a
  // fork's): fence now, and fold them before the flip makes that bank hot.
  if (unfolded_[next]) {
    if (const std::error_code e = try_fence_all()) return e;
    wait_until_left(next);
    take_bank(next, true);
    unfolded_[next] = false;
  }
  // Open the other bank, make it hot, close the old one: a record that read the old bank as hot
  // either enters it before the gate closes (and the drain waits for it) or finds it closed
  // and enters the new one.
  __atomic_store_n(&gate_[next], 0, __ATOMIC_SEQ_CST);
  __atomic_store_n(&hot_, next, __ATOMIC_SEQ_CST);
  __atomic_store_n(&gate_[old], 1, __ATOMIC_SEQ_CST);
  // No fence: the old bank's records stay in it, closed, for the next snapshot to fold first:
  // nothing is lost, and total_ is as it was.
  if (const std::error_code e = try_fence_all()) {
    unfolded_[old] = true;
    return e;
  }
  wait_until_left(old);
  take_bank(old, true);
  if (reset) {
    out = std::move(total_);
    total_ = std::move(*fresh);
  } else {
    out = total_;
  }
  return {};
}

void histogram_core::fork_flip() noexcept {
  const int old = hot_, next = 1 - old;
  __atomic_store_n(&gate_[next], 0, __ATOMIC_SEQ_CST);
  __atomic_store_n(&hot_, next, __ATOMIC_SEQ_CST);
  __atomic_store_n(&gate_[old], 1, __ATOMIC_SEQ_CST);
}

void histogram_core::fork_wait() noexcept {
  wait_until_left(1 - hot_);
}

void histogram_core::fork_parent(bool fenced) noexcept {
  // Without the fence a record may still commit into the old bank: the next snapshot fences
  // and folds it first.
  if (fenced) {
    take_bank(1 - hot_, true);
  } else {
    unfolded_[1 - hot_] = true;
  }
}

void histogram_core::fork_child() noexcept {
  // Only this thread runs here. The old bank's records all completed (unless the fence failed
  // and one was copied half done: folding zeroes its mark, so snapshots do not wait for it).
  take_bank(1 - hot_, true);
  unfolded_[0] = unfolded_[1] = false;
  take_bank(hot_, false);  // the records that ran during the fork, some perhaps half done
}

}  // namespace percpu::detail
