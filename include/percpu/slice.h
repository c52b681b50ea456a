// Time-slice extension (Linux 7.0+): a thread that holds a userspace lock asks the scheduler not
// to preempt it for a few microseconds, so that threads waiting for the lock are not stuck behind
// a holder that is not running (lock-holder preemption). The third use of the rseq area beside
// critical sections and the getcpu cache.
//
// The ABI (include/uapi/linux/rseq.h, Documentation/userspace-api/rseq.rst, selftest
// tools/testing/selftests/rseq/slice_test.c): a thread whose area is registered in the kernel's
// optimized "v2" mode (with at least AT_RSEQ_FEATURE_SIZE bytes) enables the feature with
// prctl(PR_RSEQ_SLICE_EXTENSION, PR_RSEQ_SLICE_EXTENSION_SET, PR_RSEQ_SLICE_EXT_ENABLE, 0, 0).
// It then sets slice_ctrl.request (the area's byte 28) when it enters a critical section. If an
// interrupt would reschedule it meanwhile, the kernel may instead grant an extension (5 µs by
// default): it clears request and sets slice_ctrl.granted (byte 29). On leaving, the thread
// clears request and, if granted is set, calls rseq_slice_yield(2) to give the CPU back.
//
// Where the kernel lacks the feature (built without CONFIG_RSEQ_SLICE_EXTENSION, older than 7.0,
// disabled with rseq_slice_ext=0, an area registered in the legacy 32-byte mode as glibc 2.36
// does, fallback mode), a request costs one well-predicted branch on a thread-local byte.
#pragma once

#define PERCPU_PUBLIC_HEADER 1  // lets it include percpu/internal/

#include <atomic>
#include <cstdint>
#include <string>

#include "percpu/internal/arch.h"
#include "percpu/internal/config.h"
#include "percpu/runtime.h"

namespace percpu {

/// Whether lock types request a time-slice extension while held (spinlock's second template
/// parameter, slice_extended).
enum class slice_extension { off, request };

/// What the kernel offers the calling thread, from its attempt to enable the extension.
struct slice_support {
  /// True when the kernel is known to have the feature (enabled, or turned off only on its
  /// command line): false on kernels before 7.0 (EINVAL), on ones built without
  /// CONFIG_RSEQ_SLICE_EXTENSION, and where ENOTSUPP cannot tell that from glibc's legacy
  /// registration.
  bool kernel_offers = false;
  /// True when the extension is enabled for the calling thread.
  bool enabled = false;
  /// The errno of the attempt to enable it; 0 when enabled. EINVAL: a kernel without the prctl
  /// option (before 7.0); ENOTSUPP (524): built without it, turned off with rseq_slice_ext=0, or
  /// an area registered in the legacy 32-byte mode (glibc 2.36); ENXIO: no area (fallback mode).
  int error = 0;
  /// One line saying why it is not enabled, or "enabled".
  std::string reason;
};

/// Enables the extension for the calling thread (registering percpu's own area first where
/// percpu owns registration) and says what the kernel offers. Later requests on this thread use
/// the result: a thread asks the kernel once. Thread-safe; not async-signal-safe (the first call
/// on a thread may initialize percpu).
PERCPU_API slice_support enable_slice_extension();

/// Per-thread figures of the extension, counted on the calling thread since it started.
struct slice_stats {
  std::uint64_t requests = 0;  ///< critical sections that requested an extension
  std::uint64_t granted = 0;   ///< of them, left with the extension granted (and yielded)
  std::uint64_t yielded = 0;   ///< of those, where rseq_slice_yield(2) said the CPU was given
                               ///< back within the grant (1); 0 means the grant had ended
};

/// The calling thread's figures.
PERCPU_API slice_stats this_thread_slice_stats() noexcept;

namespace detail {

/// The calling thread's state: 0 not asked yet, 1 enabled, 2 not available.
PERCPU_API extern __thread std::uint8_t t_slice_state __attribute__((tls_model("initial-exec")));
/// The calling thread's open requests: only the outermost sets and clears the request byte, so
/// nested holders (a recursive mutex, two locks at once, a signal handler inside a held section)
/// neither end the outer request early nor set it again after a grant. A handler's requests are
/// balanced by the time it returns, so the count stays right even where incrementing it is a
/// load, an add and a store.
PERCPU_API extern __thread std::uint32_t t_slice_depth __attribute__((tls_model("initial-exec")));
/// The calling thread's counters (slice_stats).
PERCPU_API extern __thread slice_stats t_slice_stats __attribute__((tls_model("initial-exec")));

/// The first request on a thread: asks the kernel (one prctl; no allocation, no lock) and
/// requests when it is enabled. Returns whether a request was made.
PERCPU_API bool slice_request_first() noexcept;
/// A request's end when the kernel granted an extension: rseq_slice_yield(2), counted.
PERCPU_API void slice_yield_granted() noexcept;

/// The calling thread's slice_ctrl bytes (in glibc's area or percpu's own): [0] request (user
/// space sets and clears it), [1] granted (the kernel's, only read here).
PERCPU_ALWAYS_INLINE volatile std::uint8_t* slice_ctrl() noexcept {
  return reinterpret_cast<volatile std::uint8_t*>(arch::thread_pointer() + g_hot.rseq_offset +
                                                  abi::kOffSliceCtrl);
}

}  // namespace detail

/// Requests a time-slice extension for the calling thread until the matching slice_release().
/// Returns whether the extension is in effect (false where the kernel does not offer it: one
/// branch). Requests nest: only the outermost sets the request and only its release ends it.
/// Async-signal-safe once percpu is initialized (the thread's first request makes one prctl).
PERCPU_ALWAYS_INLINE bool slice_request() noexcept {
  if (PERCPU_LIKELY(detail::t_slice_state == 1)) {
    if (detail::t_slice_depth++ == 0) {
      detail::slice_ctrl()[0] = 1;
      std::atomic_signal_fence(std::memory_order_seq_cst);  // the section stays after the store
      ++detail::t_slice_stats.requests;
    }
    return true;
  }
  if (PERCPU_LIKELY(detail::t_slice_state == 2)) return false;
  return detail::slice_request_first();
}

/// The first half of slice_release() (`requested`: slice_request()'s return value): ends this
/// request, and when it is the outermost clears the request byte; returns whether it was (pass
/// that to slice_yield_if_granted()). Call it before anything that may make a system call, such
/// as a mutex's release: the kernel's rseq debug mode kills a thread that enters a system call
/// with its request set while the work of an earlier grant is pending. A release without a
/// request open on this thread (another thread's lock) changes nothing.
PERCPU_ALWAYS_INLINE bool slice_clear_request(bool requested) noexcept {
  if (!requested || detail::t_slice_depth == 0) return false;
  if (--detail::t_slice_depth != 0) return false;
  std::atomic_signal_fence(std::memory_order_seq_cst);  // the section stays before the store
  detail::slice_ctrl()[0] = 0;
  return true;
}

/// The second half of slice_release() (`ended`: slice_clear_request()'s return value): when the
/// kernel granted an extension during the request, gives the CPU back with rseq_slice_yield(2),
/// as the kernel expects (it would otherwise preempt the thread when the extension's timer
/// fires).
PERCPU_ALWAYS_INLINE void slice_yield_if_granted(bool ended) noexcept {
  if (ended && PERCPU_UNLIKELY(detail::slice_ctrl()[1] != 0)) detail::slice_yield_granted();
}

/// Ends a request that slice_request() made (`requested`: its return value): the outermost
/// clears it, then yields if the kernel granted an extension meanwhile.
PERCPU_ALWAYS_INLINE void slice_release(bool requested) noexcept {
  slice_yield_if_granted(slice_clear_request(requested));
}

/// Requests an extension for a scope (slice_request() and slice_release()).
class slice_guard {
 public:
  slice_guard() noexcept : requested_(slice_request()) {}
  ~slice_guard() { slice_release(requested_); }
  slice_guard(const slice_guard&) = delete;
  slice_guard& operator=(const slice_guard&) = delete;
  /// Whether the kernel took the request (false where it does not offer the extension).
  bool requested() const noexcept { return requested_; }

 private:
  bool requested_;
};

/// Any lock (BasicLockable: lock() and unlock(); try_lock() too where `Lock` has it) that
/// requests a time-slice extension while held: std::mutex, a pthread mutex wrapper, a plain
/// spinlock. The request starts once the lock is taken and is cleared just before the release
/// (which may be a system call, see slice_clear_request); a grant's yield comes after the
/// release, so that a spinning waiter can take the lock at once. (A mutex whose release wakes a
/// sleeping waiter makes a system call inside the grant: the kernel then ends the grant and may
/// reschedule the holder before the wake-up.) Holding several, or a recursive mutex, is fine:
/// requests nest.
template <class Lock>
class slice_extended {
 public:
  template <class... Args>
  explicit slice_extended(Args&&... args) : lock_(static_cast<Args&&>(args)...) {}

  void lock() {
    lock_.lock();
    requested_ = slice_request();
  }
  bool try_lock() {
    if (!lock_.try_lock()) return false;
    requested_ = slice_request();
    return true;
  }
  void unlock() {
    const bool ended = slice_clear_request(requested_);  // read while still held
    lock_.unlock();
    slice_yield_if_granted(ended);
  }
  /// The lock itself.
  Lock& underlying() noexcept { return lock_; }

 private:
  Lock lock_;
  bool requested_ = false;  // written and read by the holder (a recursive one: the same value)
};

}  // namespace percpu
