// What the library's sources share about fallback mode beyond the inline operations'
// (percpu/internal/fallback.h): waiting out a switch, and its accounting.
#pragma once

namespace percpu::detail {

/// Waits until a switch to fallback mode in progress has completed (runtime.cpp).
void wait_for_fallback() noexcept;

/// Takes and frees each stripe of the fallback operations once (fallback.cpp): every fallback
/// operation that held one when the call began has finished, and one that takes a stripe
/// afterwards sees every store the caller made before the call. The grace period of fallback
/// mode, where there are no sections to fence. Not async-signal-safe against a handler that
/// runs a fallback operation on this thread (the stripes are taken with signals as they are).
void fallback_grace() noexcept;

/// Counts one operation run by the fallback, for the calling thread's slow-path statistics.
void note_fallback_op() noexcept;

}  // namespace percpu::detail
