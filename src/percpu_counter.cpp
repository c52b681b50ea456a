// percpu_counter's shared side: the fold lock, sum(), and limited_add()'s drain
// (percpu/percpu_counter.h says the contract).
#include "percpu/percpu_counter.h"

#include <sched.h>

#include <algorithm>
#include <stdexcept>

#include "closed_slots.h"
#include "fork_order.h"
#include "intrusive_registry.h"
#include "reopen_window.h"

namespace percpu::detail {
namespace {

std::int64_t checked_batch(std::int64_t batch, int slots) {
  if (batch == 0) return std::max<std::int64_t>(64, 2 * std::int64_t{slots});
  if (batch < 1 || batch > batched_core::kMaxBatch)
    throw std::invalid_argument(
        "percpu_counter: the batch must be 0 (the default) or in [1, 2^40]");
  return batch;
}

// Every percpu_counter of the process: fork() takes each one's fold lock, so that no fold or
// drain is copied half done (a fold's value between its slot and the shared count would be
// lost in the child, and its lock held there forever).
constinit intrusive_registry<batched_core> g_registry;

void lock_for_fork() {
  g_registry.lock();
  g_registry.for_each([](batched_core& c) { c.fork_lock(); });
}
void unlock_after_fork() {
  g_registry.for_each([](batched_core& c) { c.fork_unlock(); });
  g_registry.unlock();
}

__attribute__((constructor)) void register_fork_handlers() {
  set_fork_handlers(fork_stage::counters, lock_for_fork, unlock_after_fork, unlock_after_fork);
}

}  // namespace

batched_core::batched_core(int slots, std::int64_t batch)
    : slots_(slots), batch_(checked_batch(batch, slots)) {
  enroll();
}

batched_core::batched_core(int slots, pool_base& from, std::int64_t batch)
    : slots_(slots, from), batch_(checked_batch(batch, slots)) {
  enroll();
}

batched_core::~batched_core() {
  g_registry.remove(this);
}

void batched_core::enroll() {
  g_registry.add(this);
}

void batched_core::fork_lock() noexcept {
  fold_begin(true);
}
void batched_core::fork_unlock() noexcept {
  fold_end();
}

bool batched_core::fold_begin(bool wait) noexcept {
  for (;;) {
    std::uint32_t s = seq_.load(std::memory_order_relaxed);
    if ((s & 1) == 0 && seq_.compare_exchange_weak(s, s + 1, std::memory_order_acquire,
                                                   std::memory_order_relaxed)) {
      // The odd sequence is visible before the slot stores that follow (sum()'s retry); on
      // x86-64 the locked compare-and-swap orders them already.
#if !defined(__x86_64__)
      std::atomic_thread_fence(std::memory_order_seq_cst);
#endif
      return true;
    }
    if (!wait) return false;
    sched_yield();
  }
}

void batched_core::fold_end() noexcept {
  // Only the holder changes an odd sequence: a plain store ends it.
  seq_.store(seq_.load(std::memory_order_relaxed) + 1, std::memory_order_release);
}

std::int64_t batched_core::sum() const noexcept {
  for (unsigned attempt = 0;; ++attempt) {
    const std::uint32_t s = seq_.load(std::memory_order_acquire);
    if ((s & 1) == 0) {
      std::uint64_t total = static_cast<std::uint64_t>(count_.load(std::memory_order_relaxed));
      for (int i = 0; i < slots_.size(); ++i)
        total += static_cast<std::uint64_t>(__atomic_load_n(&slots_[i], __ATOMIC_RELAXED));
      std::atomic_thread_fence(std::memory_order_acquire);
      if (seq_.load(std::memory_order_relaxed) == s) return static_cast<std::int64_t>(total);
    }
    if (attempt % 64 == 63) {
      sched_yield();  // the fold's thread may be off its CPU
    } else {
      PERCPU_CPU_RELAX();
    }
  }
}

void batched_core::maybe_reopen() noexcept {
  if (__atomic_load_n(&gate_, __ATOMIC_RELAXED) != kExact) return;
  if (reopen_calls_.fetch_add(1, std::memory_order_relaxed) % kReopenCheck != 0) return;
  if (now_ns() < reopen_at_ns_.load(std::memory_order_relaxed)) return;
  if (!fold_begin(false)) return;
  // The slots are all zero (folded, and closed since): reopening needs no fence.
  if (__atomic_load_n(&gate_, __ATOMIC_RELAXED) == kExact)
    __atomic_store_n(&gate_, 0, __ATOMIC_SEQ_CST);
  fold_end();
}

remote_result<bool> batched_core::limited_add_shared(std::int64_t n, std::int64_t limit) noexcept {
  for (;;) {
    // Safe whatever the slots hold: the exact value is at most the count plus bound_.
    std::int64_t c = count_.load(std::memory_order_relaxed);
    while (static_cast<__int128>(c) + bound_ + n <= limit) {
      if (count_.compare_exchange_weak(c, c + n, std::memory_order_relaxed)) return {true, {}};
    }
    // Refused without a fence when the count is exact (the slots closed and folded, and no
    // drain or reopening since the gate's load), or when even the most the slots may hold
    // against it (bound_) leaves no room.
    const std::uint32_t s = seq_.load(std::memory_order_acquire);
    const std::intptr_t gate = __atomic_load_n(&gate_, __ATOMIC_ACQUIRE);
    c = count_.load(std::memory_order_acquire);
    if (gate == kExact && (s & 1) == 0 && static_cast<__int128>(c) + n > limit &&
        seq_.load(std::memory_order_acquire) == s)
      return {false, {}};
    if (static_cast<__int128>(c) - bound_ + n > limit) return {false, {}};
    // The answer depends on what the slots hold: under the fold lock, close and fold them
    // (unless closed and folded already), and answer on the exact count.
    fold_begin(true);
    if (__atomic_load_n(&gate_, __ATOMIC_RELAXED) != kExact) {
      __atomic_store_n(&gate_, kDraining, __ATOMIC_SEQ_CST);
      const std::int64_t start = now_ns();
      if (const std::error_code e = try_fence_all()) {
        __atomic_store_n(&gate_, 0, __ATOMIC_SEQ_CST);
        fold_end();
        return {false, e};
      }
      fence_ns_ = now_ns() - start;
      // No section commits on a slot now: fold them all.
      count_.fetch_add(static_cast<std::int64_t>(take_closed_slots(slots_)),
                       std::memory_order_relaxed);
      reopen_at_ns_.store(now_ns() + kReopenFactor * fence_ns_, std::memory_order_relaxed);
      __atomic_store_n(&gate_, kExact, __ATOMIC_SEQ_CST);
    }
    // The slots are empty and closed, and no one reopens them while this thread holds the
    // lock: the count is the exact value.
    c = count_.load(std::memory_order_relaxed);
    bool added = false;
    while (static_cast<__int128>(c) + n <= limit) {
      if (count_.compare_exchange_weak(c, c + n, std::memory_order_relaxed)) {
        added = true;
        break;
      }
    }
    fold_end();
    return {added, {}};
  }
}

}  // namespace percpu::detail
