// percpu_ref's mode switch and shared count (percpu/percpu_ref.h says the contract).
#include "percpu/percpu_ref.h"

#include <cstdio>
#include <cstdlib>
#include <stdexcept>

#include "closed_slots.h"
#include "fork_window.h"

namespace percpu::detail {

ref_core::ref_core(int slots, std::function<void()> release)
    : slots_(slots), release_(std::move(release)) {}

ref_core::ref_core(int slots, pool_base& from, std::function<void()> release)
    : slots_(slots, from), release_(std::move(release)) {}

void ref_core::misuse_abort(const char* what) noexcept {
  std::fprintf(stderr, "percpu_ref: %s\n", what);
  std::abort();
}

const char* ref_core::atomic_get() noexcept {
  const std::intptr_t before = count_.fetch_add(1, std::memory_order_relaxed);
  if (PERCPU_UNLIKELY(before <= 0))
    return "get() after the count reached zero (the release callback has run)";
  return nullptr;
}

const char* ref_core::atomic_put() noexcept {
  return after_put(count_.fetch_sub(1, std::memory_order_release) - 1);
}

const char* ref_core::after_put(std::intptr_t now) noexcept {
  if (PERCPU_LIKELY(now > 0)) return nullptr;
  if (now < 0) return "put() without a matching get(): the count went below zero";
  std::atomic_thread_fence(std::memory_order_acquire);  // every holder's put happens before
  if (released_.exchange(true, std::memory_order_acq_rel))
    return "the count reached zero a second time (a get() after the release)";
  tsan_acquire(&mode_);
  // The callback may destroy this object: nothing here is touched after it.
  std::function<void()> release = std::move(release_);
  if (release) release();
  return nullptr;
}

bool ref_core::atomic_tryget() noexcept {
  std::intptr_t n = count_.load(std::memory_order_relaxed);
  while (n > 0) {
    if (count_.compare_exchange_weak(n, n + 1, std::memory_order_relaxed)) return true;
  }
  return false;
}

std::error_code ref_core::kill_or_error(const char*& misuse) noexcept {
  std::intptr_t now = 0;
  if (const std::error_code e = switch_to_atomic(misuse, now)) return e;
  // The release, if the initial reference was the last: outside the fork window (the callback
  // may fork); the callback may destroy this object.
  const char* put_misuse = after_put(now);
  if (misuse == nullptr) misuse = put_misuse;
  return {};
}

std::error_code ref_core::switch_to_atomic(const char*& misuse, std::intptr_t& now) noexcept {
  // From the gate to the drop of the initial reference the count is half switched: fork()
  // waits (a child would otherwise keep a dead ref whose slots were never folded, or whose
  // initial reference no thread of it can drop, and a held switch_mutex_).
  const fork_window no_fork;
  const std::lock_guard<std::mutex> lock(switch_mutex_);
  if ((__atomic_load_n(&mode_, __ATOMIC_SEQ_CST) & kDead) != 0)
    return std::make_error_code(std::errc::operation_not_permitted);
  __atomic_store_n(&mode_, kAtomic | kDead, __ATOMIC_SEQ_CST);
  if (const std::error_code e = try_fence_all()) {
    // Gets and puts that went to the shared count meanwhile stay there (it is biased).
    __atomic_store_n(&mode_, 0, __ATOMIC_SEQ_CST);
    return e;
  }
  // No section commits on a slot now: fold their sum into the shared count, and zero them for
  // a resurrect().
  const std::uintptr_t sum = take_closed_slots(slots_);
  std::atomic_thread_fence(std::memory_order_acquire);  // the per-CPU puts' holders came first
  const std::intptr_t total =
      count_.fetch_add(static_cast<std::intptr_t>(sum) - kBias, std::memory_order_acq_rel) +
      static_cast<std::intptr_t>(sum) - kBias;
  if (total < 1) misuse = "kill(): more puts than gets while in per-CPU mode";
  now = count_.fetch_sub(1, std::memory_order_release) - 1;  // the initial reference
  return {};
}

void ref_core::throw_kill_error(std::error_code e) {
  if (e == std::errc::operation_not_permitted)
    throw std::logic_error("percpu_ref::kill: already killed");
  throw std::system_error(e, "percpu_ref::kill");
}

void ref_core::resurrect() {
  const fork_window no_fork;
  const std::lock_guard<std::mutex> lock(switch_mutex_);
  if ((__atomic_load_n(&mode_, __ATOMIC_SEQ_CST) & kDead) == 0)
    throw std::logic_error("percpu_ref::resurrect: not killed");
  std::intptr_t n = count_.load(std::memory_order_acquire);
  do {
    if (n <= 0 || released_.load(std::memory_order_acquire))
      throw std::logic_error("percpu_ref::resurrect: the count has reached zero (released)");
  } while (!count_.compare_exchange_weak(n, n + kBias + 1, std::memory_order_acq_rel));
  // The slots are zero since kill(); the bias is back, so per-CPU counts may go anywhere.
  __atomic_store_n(&mode_, 0, __ATOMIC_SEQ_CST);
}

bool ref_core::is_zero() const noexcept {
  return (__atomic_load_n(&mode_, __ATOMIC_SEQ_CST) & kDead) != 0 &&
         count_.load(std::memory_order_acquire) == 0;
}

bool ref_core::is_dying() const noexcept {
  return (__atomic_load_n(&mode_, __ATOMIC_SEQ_CST) & kDead) != 0;
}

}  // namespace percpu::detail
