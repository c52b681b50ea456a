// Acting on another CPU's (or mm_cid's) per-CPU data while threads may be running critical
// sections on it: the fence that makes that safe, and the guard every remote operation holds.
//
// The pattern (README, "Remote access"): close the slot with a store that every section on
// it checks before it commits (a gate word, or a lock bit in the word it compares), fence the
// index so that sections which read the slot before the close have committed or aborted, then
// work on the slot with atomic instructions, and reopen it.
#pragma once

#define PERCPU_PUBLIC_HEADER 1  // lets it include percpu/internal/

#include <signal.h>

#include <cstdint>
#include <mutex>
#include <system_error>
#include <type_traits>

#include "percpu/cpu.h"
#include "percpu/internal/config.h"
#include "percpu/internal/current_result.h"

namespace percpu {

/// Why a remote operation (a drain, a fence) did not run. Values of std::error_code in
/// remote_category(); nothing was changed when one is reported.
enum class remote_errc {
  /// No fence is possible: membarrier's RSEQ fence is unavailable (seccomp, a kernel before
  /// 5.10), the calling thread may not run on the CPU to fence (a cpuset, an affinity the kernel
  /// refuses), and a thread of the process kept running there, so a critical section that read
  /// the slot before it was closed could still commit. Retry later, from a thread that may run
  /// there, or leave that index alone.
  no_fence = 1,
};

/// The category of remote_errc ("percpu remote").
PERCPU_API const std::error_category& remote_category() noexcept;

/// Makes remote_errc usable as a std::error_code.
inline std::error_code make_error_code(remote_errc e) noexcept {
  return {static_cast<int>(e), remote_category()};
}

/// The result of a try_ operation: `value`, or `error` (then `value` is empty and nothing
/// changed).
template <class V>
struct remote_result {
  V value{};
  std::error_code error;
  /// True when the operation ran.
  explicit operator bool() const noexcept { return !error; }
};

/// Fence for index `index` of mode `mode`: when it returns, every critical section that a
/// thread of this process was running on that index when the call began has either committed
/// or will restart at its abort handler. For cpu_id it fences one CPU; for mm_cid every CPU
/// (the thread holding an mm_cid may run anywhere).
///
/// Method: membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED_RSEQ) (Linux 5.10), targeted with
/// MEMBARRIER_CMD_FLAG_CPU for cpu_id. Where membarrier is unavailable, the calling thread runs
/// once on the CPU (cpu_id) or on every CPU of its affinity mask (mm_cid): a section in flight
/// there is preempted by it and aborts. In fallback mode there are no sections, and it returns
/// at once. Not async-signal-safe.
///
/// Where the calling thread may not run on a CPU to fence it (without membarrier), the fence
/// holds when, after the call began, every other thread of the process was seen not running
/// on such a CPU (/proc/self/task/*/stat: its state and CPU): a thread that ran a section
/// there has since left the CPU, so the section aborts. An offline CPU runs no thread, so its
/// slots are fenced that way at once; so are the CPUs outside a cpuset that holds every thread.
/// A thread seen running there for 50 ms makes the fence fail.
///
/// Returns an empty error_code when fenced, remote_errc::no_fence otherwise. Throws
/// std::out_of_range for an index outside the index space.
PERCPU_API std::error_code try_fence_index(index_mode mode, int index);

/// try_fence_index(), throwing std::system_error with the remote_errc::no_fence code when no
/// fence is possible.
PERCPU_API void fence_index(index_mode mode, int index);

/// Fence for every index of both modes: when it returns, every critical section that a thread
/// of this process was running when the call began has either committed or will restart at its
/// abort handler, and every fallback-mode operation that had begun has finished. So a word
/// that sections (or fallback operations) check before they commit, stored before the call,
/// is seen by everything that commits after it: the grace period of percpu_rwsem's writers
/// and percpu_ref's kill. Method as try_fence_index() for mm_cid (all CPUs at once with
/// membarrier), plus, outside rseq mode, a pass over the fallback operations' locks. Costs
/// one membarrier system call (microseconds; interrupts the CPUs that run this process's
/// threads). Not async-signal-safe; not a cancellation point (cancellation is disabled while
/// it reads /proc).
///
/// Returns an empty error_code when fenced, remote_errc::no_fence when no fence is possible,
/// std::errc::not_enough_memory when the methods after membarrier could not allocate.
PERCPU_API std::error_code try_fence_all() noexcept;

namespace detail {

/// Held for the duration of one remote operation. Remote operations of the process run one at a
/// time; signals are blocked on the holder (a handler using the structure would otherwise wait
/// for the slot its own thread closed); cancellation is disabled on the holder (the fence may
/// read /proc, whose open() and read() are cancellation points: a thread cancelled there would
/// leave the slot closed for good); fork() waits until no remote operation is in progress, so a
/// child never inherits a closed slot.
class remote_section {
 public:
  PERCPU_API remote_section() noexcept;
  /// Takes the section only if no remote operation is in progress (this thread's included: an
  /// allocator called from inside one must not wait for it); see owns().
  PERCPU_API explicit remote_section(std::try_to_lock_t) noexcept;
  PERCPU_API ~remote_section();
  remote_section(const remote_section&) = delete;
  remote_section& operator=(const remote_section&) = delete;

  /// False when the try-to-lock constructor found another remote operation in progress.
  bool owns() const noexcept { return owns_; }

 private:
  sigset_t saved_;
  int cancel_state_ = 0;  // the holder's cancelability state before the section
  bool owns_ = true;
};

/// Reopens a slot that a remote operation closed, on every exit from the scope: a return, an
/// exception, or the unwinding of a cancelled thread. Constructed once the slot is closed, with
/// the word to store and the value that reopens it unchanged (nothing lost); reopen_with() names
/// the value for the operation's normal end (an emptied count, say). The store is a release
/// store, so what the operation did to the slot is visible to whoever sees it open.
class reopen_on_exit {
 public:
  reopen_on_exit(std::intptr_t* word, std::intptr_t unchanged) noexcept
      : word_(word), value_(unchanged) {}
  ~reopen_on_exit() { __atomic_store_n(word_, value_, __ATOMIC_RELEASE); }
  reopen_on_exit(const reopen_on_exit&) = delete;
  reopen_on_exit& operator=(const reopen_on_exit&) = delete;

  /// The value stored at the end of the scope instead of the unchanged one.
  void reopen_with(std::intptr_t value) noexcept { value_ = value; }

 private:
  std::intptr_t* word_;
  std::intptr_t value_;
};

/// Bit set in a buffer's count word while a remote operation holds the buffer closed. Counts
/// stay far below it, and sections compare the whole word, so none commits while it is set.
inline constexpr std::intptr_t kCountClosed = std::intptr_t{1} << arch::kCountClosedBit;

/// Closes the buffer slot of `index` whose sections compare the count word `*count`: sets
/// kCountClosed with a compare-and-swap, fences the index, and starts over if a section that
/// was already running committed over the closed word. Stores the count it closed (without the
/// bit) in `n`. The caller holds a remote_section and reopens the slot by storing a count.
/// Returns what try_fence_index() returns; on an error the slot is reopened as it was.
template <index_mode M>
std::error_code try_close_count(std::intptr_t* count, int index, std::intptr_t& n) {
  for (;;) {
    n = __atomic_load_n(count, __ATOMIC_ACQUIRE);
    if (!__atomic_compare_exchange_n(count, &n, n | kCountClosed, false, __ATOMIC_SEQ_CST,
                                     __ATOMIC_RELAXED))
      continue;
    if (const std::error_code e = try_fence_index(M, index)) {
      std::intptr_t closed = n | kCountClosed;
      __atomic_compare_exchange_n(count, &closed, n, false, __ATOMIC_RELEASE, __ATOMIC_RELAXED);
      return e;
    }
    if (__atomic_load_n(count, __ATOMIC_ACQUIRE) == (n | kCountClosed)) return {};
  }
}

/// Waits a little while a slot is closed by a remote operation (which holds it for about one
/// fence: microseconds).
PERCPU_API void wait_for_remote() noexcept;

}  // namespace detail
}  // namespace percpu

template <>
struct std::is_error_code_enum<percpu::remote_errc> : std::true_type {};
