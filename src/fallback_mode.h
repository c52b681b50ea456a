// What the library's sources share about fallback mode beyond the inline operations'
// (percpu/internal/fallback.h): waiting out a switch, and its accounting.
#pragma once

namespace percpu::detail {

/// Waits until a switch to fallback mode in progress has completed (runtime.cpp).
void wait_for_fallback() noexcept;

/// Counts one operation run by the fallback, for the calling thread's slow-path statistics.
void note_fallback_op() noexcept;

}  // namespace percpu::detail
