// percpu_ref: a reference count whose get and put touch only the calling CPU's slot until the
// owner kills it, as the kernel's percpu_ref (lib/percpu-refcount.c).
#pragma once

#define PERCPU_PUBLIC_HEADER 1  // lets it include percpu/internal/

#include "percpu/internal/config.h"  // first: the C++20 check

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <system_error>

#include "percpu/current_ops.h"
#include "percpu/ops.h"
#include "percpu/pool.h"
#include "percpu/remote.h"
#include "percpu/slot_array.h"
#include "percpu/tsan.h"

namespace percpu {

namespace detail {

/// The part of percpu_ref that does not depend on the index mode (percpu_ref.cpp).
class ref_core {
 public:
  ref_core(const ref_core&) = delete;
  ref_core& operator=(const ref_core&) = delete;

  /// percpu_ref's kill (reporting misuse found on the way in `misuse`), resurrect, and state.
  PERCPU_API std::error_code kill_or_error(const char*& misuse) noexcept;
  [[noreturn]] PERCPU_API static void throw_kill_error(std::error_code e);
  PERCPU_API void resurrect();
  PERCPU_API bool is_zero() const noexcept;
  PERCPU_API bool is_dying() const noexcept;

  /// Prints `what` (a misuse of a percpu_ref) and aborts.
  [[noreturn]] PERCPU_API static void misuse_abort(const char* what) noexcept;
  /// Reports a misuse found by the calls below: in a debug build of the caller (NDEBUG
  /// undefined) prints it and aborts; in a release build nothing (the documented outcome).
  static void report(const char* misuse) noexcept {
#ifndef NDEBUG
    if (misuse != nullptr) misuse_abort(misuse);
#else
    (void)misuse;
#endif
  }

  /// The mode word's bits (the gate of the per-CPU sections: 0 is per-CPU mode).
  static constexpr std::intptr_t kAtomic = 1;
  static constexpr std::intptr_t kDead = 2;
  /// Added to the shared count while the slots count, so that no get or put on the shared
  /// count during a mode switch can take it to zero (the kernel's PERCPU_COUNT_BIAS).
  static constexpr std::intptr_t kBias = std::intptr_t{1} << 62;

 protected:
  PERCPU_API ref_core(int slots, std::function<void()> release);
  PERCPU_API ref_core(int slots, pool_base& from, std::function<void()> release);
  ~ref_core() = default;

  /// get/put/tryget on the shared count (atomic mode, or a switch in progress); put runs the
  /// release at zero. get and put return what misuse they found (nullptr: none).
  PERCPU_API const char* atomic_get() noexcept;
  PERCPU_API const char* atomic_put() noexcept;
  PERCPU_API bool atomic_tryget() noexcept;
  /// kill()'s switch and its drop of the initial reference (`now`: the count after it), all
  /// but the release that may follow.
  std::error_code switch_to_atomic(const char*& misuse, std::intptr_t& now) noexcept;
  /// A put's part after its decrement left the count at `now`: the release at zero.
  const char* after_put(std::intptr_t now) noexcept;

  slot_array<std::intptr_t> slots_;     // per-CPU mode's counts: only their sum means anything
  alignas(64) std::intptr_t mode_ = 0;  // read by every section: a line of its own
  alignas(64) std::atomic<std::intptr_t> count_{kBias + 1};  // the shared count (+kBias)
  std::atomic<bool> released_{false};
  std::mutex switch_mutex_;  // kill and resurrect, one at a time
  std::function<void()> release_;
};

}  // namespace detail

/// A reference count for an object that many threads get and put while it lives, and whose
/// owner decides when it should go away: get() and put() are one critical section on the
/// calling thread's slot (index mode M) with no atomic instruction and no shared cache line,
/// until kill() switches the count to one shared atomic; the release callback then runs exactly
/// once, when the count reaches zero. The kernel's percpu_ref contract (percpu_ref_init, get,
/// tryget, tryget_live, put, kill, resurrect, is_zero), without its switch_to_atomic/percpu
/// and confirm_kill extras.
///
/// States: live (per-CPU mode; it starts there holding one reference, the initial one), dying
/// (killed: atomic mode, the initial reference dropped), released (the count reached zero after
/// kill(): the callback ran). In per-CPU mode the count is never compared with zero; only after
/// kill() can it reach zero. kill() closes the slots' gate, fences every CPU (try_fence_all():
/// a get or put in flight either committed on its slot or will abort and go to the shared
/// count), folds the slots' sum into the shared count and drops the initial reference.
///
/// Costs (x86-64, rseq mode): get() and put() about one percpu::counter add each; kill() one
/// membarrier system call and a pass over the slots; in atomic mode get() and put() one atomic
/// read-modify-write on the shared count.
///
/// Memory order: a put() is a release and the put() that reaches zero an acquire before the
/// callback, so the callback sees everything any holder did before its put (the kernel's
/// guarantee).
///
/// Misuse: a put() without a matching get, a get() after the release, kill() twice, resurrect()
/// of a live or released count. In debug builds (NDEBUG undefined) get and put detect it in
/// atomic mode, print what happened and abort; in release builds a get after the release
/// counts but never runs the callback again, and a count taken below zero stays there (the
/// callback never runs twice: it runs at most once in the object's life). kill() twice and a
/// bad resurrect() throw std::logic_error in every build. In per-CPU mode a put without a
/// get is invisible until kill() folds the sum; kill() then reports it as misuse.
///
/// Thread and signal safety: get, tryget, tryget_live and put may be called from any thread and
/// from signal handlers (no lock, no allocation), also in atomic mode; the callback then runs
/// in the handler, inside the put() that reached zero. kill(), try_kill() and resurrect() are
/// for threads (they may take a mutex and fence), one at a time per object. The callback may
/// destroy the percpu_ref (put() touches nothing after calling it); it must not throw.
/// fork(): a kill() or resurrect() in another thread is never copied half done (fork() waits
/// for its switch and kill()'s drop of the initial reference; a release callback runs after,
/// so it may fork); the child's ref is in the mode the switch left it in, with the
/// references the parent's threads held still counted (as with any count a thread holds).
template <index_mode M = index_mode::cpu_id>
class percpu_ref : private detail::ref_core {
 public:
  /// A live count holding the initial reference; `release` runs once the count reaches zero
  /// after kill(). Throws std::bad_alloc without memory for the slots.
  explicit percpu_ref(std::function<void()> release)
      : ref_core(index_space<M>(), std::move(release)) {}

  /// The same with its slots in one 8-byte object of `from` (which must outlive it). Throws as
  /// slot_array's pool constructor.
  percpu_ref(pool<M>& from, std::function<void()> release)
      : ref_core(index_space<M>(), from, std::move(release)) {}

  /// Takes a reference. Precondition: the caller holds one, or the count is live (not yet
  /// released): the kernel's percpu_ref_get.
  PERCPU_ALWAYS_INLINE void get() noexcept {
    const detail::current_result r = detail::current_gated_add<M>(slots_, &mode_, 1);
    if (PERCPU_UNLIKELY(r != detail::current_result::committed)) add_cold(r, 1);
  }

  /// Takes a reference unless the count has reached zero; returns whether it took one.
  PERCPU_ALWAYS_INLINE bool tryget() noexcept {
    const detail::current_result r = detail::current_gated_add<M>(slots_, &mode_, 1);
    if (PERCPU_LIKELY(r == detail::current_result::committed)) return true;
    return tryget_cold(r, false);
  }

  /// Takes a reference unless kill() has been called (it may still succeed while a kill() is
  /// in progress; it fails once kill() has returned); returns whether it took one.
  PERCPU_ALWAYS_INLINE bool tryget_live() noexcept {
    const detail::current_result r = detail::current_gated_add<M>(slots_, &mode_, 1);
    if (PERCPU_LIKELY(r == detail::current_result::committed)) return true;
    return tryget_cold(r, true);
  }

  /// Drops a reference; after kill(), the one that takes the count to zero runs the release
  /// callback (inside this call, as its last act).
  PERCPU_ALWAYS_INLINE void put() noexcept {
    detail::tsan_release(&mode_);
    std::atomic_thread_fence(std::memory_order_release);  // the holder's accesses come first
    const detail::current_result r = detail::current_gated_add<M>(slots_, &mode_, -1);
    if (PERCPU_UNLIKELY(r != detail::current_result::committed)) add_cold(r, -1);
  }

  /// Switches to the shared count and drops the initial reference (the kernel's
  /// percpu_ref_kill). Throws std::logic_error when already killed, std::system_error
  /// (remote_errc::no_fence) when no fence is possible (then nothing changed). If that drop
  /// takes the count to zero, the callback runs inside this call.
  void kill() {
    const char* misuse = nullptr;
    const std::error_code e = kill_or_error(misuse);
    report(misuse);
    if (e) throw_kill_error(e);
  }

  /// kill(), returning remote_errc::no_fence instead of throwing, and std::errc::
  /// operation_not_permitted when already killed (nothing changes then).
  std::error_code try_kill() noexcept {
    const char* misuse = nullptr;
    const std::error_code e = kill_or_error(misuse);
    report(misuse);
    return e;
  }

  /// Back to per-CPU mode with the initial reference, as before kill() (the kernel's
  /// percpu_ref_resurrect). Precondition: killed and not released, which the caller knows
  /// by holding a reference. Throws std::logic_error otherwise.
  void resurrect() { ref_core::resurrect(); }

  /// True when the count has reached zero after kill() (the callback has run or is running).
  bool is_zero() const noexcept { return ref_core::is_zero(); }

  /// True after kill() (until resurrect()): tryget_live() fails.
  bool is_dying() const noexcept { return ref_core::is_dying(); }

  /// Number of slots (the index space of M).
  int slots() const noexcept { return slots_.size(); }

 private:
  // get/put after the fast section did not commit: the full loop on the current index while in
  // per-CPU mode (the gate open), the shared count once the gate is closed.
  bool percpu_add(std::intptr_t delta) noexcept {
    for (;;) {
      const status s = retry<M>([this, delta](int index) {
        std::intptr_t* slot = &slots_[index];
        const std::intptr_t n = __atomic_load_n(slot, __ATOMIC_RELAXED);
        return compare_compare_store<M>(slot, n, &mode_, 0, n + delta, index);
      });
      if (s == status::committed) return true;
      if (__atomic_load_n(&mode_, __ATOMIC_SEQ_CST) != 0) return false;
    }
  }

  [[gnu::noinline, gnu::cold]] void add_cold(detail::current_result fast,
                                             std::intptr_t delta) noexcept {
    detail::count_fast_attempt(detail::fast_status(fast));
    if (percpu_add(delta)) return;
    report(delta > 0 ? atomic_get() : atomic_put());
  }

  [[gnu::noinline, gnu::cold]] bool tryget_cold(detail::current_result fast, bool live) noexcept {
    detail::count_fast_attempt(detail::fast_status(fast));
    if (percpu_add(1)) return true;
    if (live && (__atomic_load_n(&mode_, __ATOMIC_SEQ_CST) & kDead) != 0) return false;
    return atomic_tryget();
  }
};

}  // namespace percpu
