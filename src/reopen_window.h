// The window a per-CPU path stays closed after a fence that closed it (percpu_rwsem's readers,
// percpu_counter's slots): BRAVO's reader bias (Dice and Kogan 2019), timed by the clock.
#pragma once

#include <time.h>

#include <cstdint>

namespace percpu::detail {

/// CLOCK_MONOTONIC in nanoseconds (the vDSO: no system call).
inline std::int64_t now_ns() noexcept {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

/// The path reopens this many times the last fence's cost after it: callers that keep closing
/// it then spend at most about a tenth of their time fencing (BRAVO's N = 9).
inline constexpr std::int64_t kReopenFactor = 10;

/// Callers on the closed path look at the clock once in this many calls.
inline constexpr std::uint32_t kReopenCheck = 64;

}  // namespace percpu::detail
