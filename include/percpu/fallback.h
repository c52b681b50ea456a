// Fallback implementations of the per-CPU operations, for fallback mode (no rseq): the same
// operation on the same slot with the same result, made atomic without critical sections.
//
// add and compare_store are single atomic instructions (lock xadd / lock cmpxchg), so they are
// async-signal-safe. The multi-step operations take a striped spinlock chosen by the address of
// `v` (all operations on one word serialize on one stripe) with signals blocked while it is held,
// so a signal handler using the same structure cannot deadlock on it; they commit with a
// compare-and-swap so that a concurrent add or compare_store on the same word is never lost.
// Results: committed or compare_failed, never aborted or index_changed.
#pragma once

#include <cstddef>
#include <cstdint>

#include "percpu/config.h"
#include "percpu/status.h"

namespace percpu::detail {

PERCPU_API status fallback_add(std::intptr_t* v, std::intptr_t count) noexcept;
PERCPU_API status fallback_compare_store(std::intptr_t* v, std::intptr_t expect,
                                         std::intptr_t newv) noexcept;
PERCPU_API status fallback_compare_compare_store(std::intptr_t* v, std::intptr_t expect,
                                                 std::intptr_t* v2, std::intptr_t expect2,
                                                 std::intptr_t newv) noexcept;
PERCPU_API status fallback_pop(std::intptr_t* v, std::intptr_t expect, std::ptrdiff_t offset,
                               std::intptr_t* out) noexcept;
PERCPU_API status fallback_compare_store_store(std::intptr_t* v, std::intptr_t expect,
                                               std::intptr_t* v2, std::intptr_t newv2,
                                               std::intptr_t newv) noexcept;
PERCPU_API status fallback_compare_memcpy_store(std::intptr_t* v, std::intptr_t expect, void* dst,
                                                const void* src, std::size_t len,
                                                std::intptr_t newv) noexcept;

/// Makes sure the process is initialized and, if a switch to fallback mode is in progress, that
/// it has finished. Returns true when operations must use the fallback, false when the caller
/// should retry in rseq mode (the process just finished initializing in rseq mode).
PERCPU_API bool prepare_fallback() noexcept;

}  // namespace percpu::detail
