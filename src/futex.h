// The futex calls the library's sleeping waits use (percpu_rwsem): private, process-private
// futexes on 32-bit words. futex(2) through syscall(), which is not a cancellation point, so a
// waiter is never cancelled with a lock's state half changed.
#pragma once

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <climits>
#include <cstdint>

namespace percpu::detail {

/// Sleeps while `*word` holds `expected`, for at most `timeout_ns` nanoseconds (0: no limit).
/// Returns on a wake, a signal, the timeout, or at once when the word already differs: callers
/// check their condition again in a loop.
inline void futex_wait(std::atomic<std::uint32_t>& word, std::uint32_t expected,
                       long timeout_ns = 0) noexcept {
  timespec ts{timeout_ns / 1000000000L, timeout_ns % 1000000000L};
  syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAIT_PRIVATE, expected,
          timeout_ns > 0 ? &ts : nullptr, nullptr, 0);
}

/// Wakes up to `count` threads sleeping in futex_wait() on `word` (INT_MAX: all of them).
inline void futex_wake(std::atomic<std::uint32_t>& word, int count = INT_MAX) noexcept {
  syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAKE_PRIVATE, count, nullptr,
          nullptr, 0);
}

}  // namespace percpu::detail
