// Fallback mode's per-CPU operations (see percpu/internal/fallback.h for the rules).
#include "percpu/internal/fallback.h"
#include "percpu/internal/config.h"

#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <cstring>

#include "fallback_mode.h"
#include "fork_order.h"
#include "percpu/runtime.h"
#include "signals_blocked.h"

namespace percpu::detail {
namespace {

// One lock per cache line; a word's stripe is chosen by its cache line, so all operations on one
// word (and on its neighbours in the same line) serialize on the same lock.
constexpr std::size_t kStripes = 256;
struct alignas(64) stripe {
  std::atomic<bool> locked{false};
};
stripe g_stripes[kStripes];

stripe& stripe_of(const void* v) {
  const auto line = reinterpret_cast<std::uintptr_t>(v) >> 6;
  return g_stripes[(line ^ (line >> 8)) % kStripes];
}

// Holds a stripe with all signals blocked, so a handler on this thread cannot wait for it.
class stripe_guard {
 public:
  explicit stripe_guard(const void* v) : stripe_(stripe_of(v)) {
    while (stripe_.locked.exchange(true, std::memory_order_acquire)) {
      while (stripe_.locked.load(std::memory_order_relaxed)) PERCPU_CPU_RELAX();
    }
  }
  ~stripe_guard() { stripe_.locked.store(false, std::memory_order_release); }
  stripe_guard(const stripe_guard&) = delete;
  stripe_guard& operator=(const stripe_guard&) = delete;

 private:
  signals_blocked
      no_signals_;  // first: blocked before the stripe is taken, until after it is freed
  stripe& stripe_;
};

std::intptr_t load(const std::intptr_t* v) {
  return __atomic_load_n(v, __ATOMIC_ACQUIRE);
}

// Commits *v: expect -> newv with a CAS, so that a lock-free add/compare_store that slipped in
// makes this attempt fail instead of being overwritten.
bool commit(std::intptr_t* v, std::intptr_t expect, std::intptr_t newv) {
  return __atomic_compare_exchange_n(v, &expect, newv, false, __ATOMIC_RELEASE, __ATOMIC_RELAXED);
}

}  // namespace

void fallback_locks_before_fork() noexcept {
  for (auto& st : g_stripes) {
    while (st.locked.exchange(true, std::memory_order_acquire)) PERCPU_CPU_RELAX();
  }
}

void fallback_locks_after_fork() noexcept {
  for (auto& st : g_stripes) st.locked.store(false, std::memory_order_release);
}

void fallback_grace() noexcept {
  // Signals stay blocked while this thread holds a stripe, as in stripe_guard: a handler's
  // fallback operation on a word of that stripe would otherwise spin on its own thread's lock.
  sigset_t saved;
  block_all_signals(saved);
  for (auto& st : g_stripes) {
    while (st.locked.exchange(true, std::memory_order_acquire)) PERCPU_CPU_RELAX();
    st.locked.store(false, std::memory_order_release);
  }
  restore_signals(saved);
}

bool prepare_fallback() noexcept {
  std::uint32_t mode = __atomic_load_n(&g_hot.fallback, __ATOMIC_ACQUIRE);
  if (mode == kUninitialized) {
    initialize();
    mode = __atomic_load_n(&g_hot.fallback, __ATOMIC_ACQUIRE);
  }
  if (mode == kRseqMode) return false;
  if (mode == kSwitching) wait_for_fallback();
  note_fallback_op();
  return true;
}

status fallback_add(std::intptr_t* v, std::intptr_t count) noexcept {
  __atomic_fetch_add(v, count, __ATOMIC_RELAXED);
  return status::committed;
}

status fallback_compare_store(std::intptr_t* v, std::intptr_t expect, std::intptr_t newv) noexcept {
  // Under the stripe too: a lock-free compare_store could detach and re-push a list head
  // between a pop's read of the head's next pointer and its commit (ABA).
  stripe_guard guard(v);
  return commit(v, expect, newv) ? status::committed : status::compare_failed;
}

status fallback_compare_compare_store(std::intptr_t* v, std::intptr_t expect, std::intptr_t* v2,
                                      std::intptr_t expect2, std::intptr_t newv) noexcept {
  for (;;) {
    stripe_guard guard(v);
    if (load(v) != expect || load(v2) != expect2) return status::compare_failed;
    if (commit(v, expect, newv)) return status::committed;
  }
}

status fallback_pop(std::intptr_t* v, std::intptr_t expect, std::ptrdiff_t offset,
                    std::intptr_t* out) noexcept {
  std::intptr_t always_open = 0;  // a pop is a compare_pop whose second word always matches
  return fallback_compare_pop(v, expect, &always_open, 0, offset, out);
}

status fallback_compare_pop(std::intptr_t* v, std::intptr_t expect, std::intptr_t* v2,
                            std::intptr_t expect2, std::ptrdiff_t offset,
                            std::intptr_t* out) noexcept {
  stripe_guard guard(v);
  for (;;) {
    if (load(v2) != expect2) return status::compare_failed;
    const std::intptr_t head = load(v);
    if (head == expect) return status::compare_failed;
    const std::intptr_t next = load(reinterpret_cast<const std::intptr_t*>(head + offset));
    if (commit(v, head, next)) {
      *out = head;
      return status::committed;
    }
  }
}

status fallback_compare_push(std::intptr_t* v, std::intptr_t* v2, std::intptr_t expect2,
                             std::ptrdiff_t offset, std::intptr_t item) noexcept {
  stripe_guard guard(v);
  for (;;) {
    if (load(v2) != expect2) return status::compare_failed;
    const std::intptr_t head = load(v);
    __atomic_store_n(reinterpret_cast<std::intptr_t*>(item + offset), head, __ATOMIC_RELAXED);
    if (commit(v, head, item)) return status::committed;
  }
}

// The array stack's count is committed with a compare-and-swap, like every fallback commit:
// a remote operation's close (a compare-and-swap of the count, which takes no stripe) makes the
// commit fail, and the next round sees the closed count.
status fallback_array_push(std::intptr_t* count, std::uintptr_t limit, std::intptr_t* base,
                           std::intptr_t value) noexcept {
  stripe_guard guard(count);
  for (;;) {
    const std::intptr_t n = load(count);
    if (static_cast<std::uintptr_t>(n) >= limit) return status::compare_failed;
    __atomic_store_n(&base[n], value, __ATOMIC_RELAXED);
    if (commit(count, n, n + 1)) return status::committed;
  }
}

status fallback_array_pop(std::intptr_t* count, std::uintptr_t limit, std::intptr_t* base,
                          std::intptr_t* out) noexcept {
  stripe_guard guard(count);
  for (;;) {
    const std::intptr_t n = load(count);
    if (static_cast<std::uintptr_t>(n) - 1 >= limit) return status::compare_failed;
    const std::intptr_t top = __atomic_load_n(&base[n - 1], __ATOMIC_RELAXED);
    if (commit(count, n, n - 1)) {
      *out = top;
      return status::committed;
    }
  }
}

status fallback_compare_store_store(std::intptr_t* v, std::intptr_t expect, std::intptr_t* v2,
                                    std::intptr_t newv2, std::intptr_t newv) noexcept {
  stripe_guard guard(v);
  if (load(v) != expect) return status::compare_failed;
  __atomic_store_n(v2, newv2, __ATOMIC_RELAXED);
  return commit(v, expect, newv) ? status::committed : status::compare_failed;
}

status fallback_compare_memcpy_store(std::intptr_t* v, std::intptr_t expect, void* dst,
                                     const void* src, std::size_t len,
                                     std::intptr_t newv) noexcept {
  stripe_guard guard(v);
  if (load(v) != expect) return status::compare_failed;
  std::memcpy(dst, src, len);
  return commit(v, expect, newv) ? status::committed : status::compare_failed;
}

}  // namespace percpu::detail
