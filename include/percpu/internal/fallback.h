// Fallback implementations of the per-CPU operations, for fallback mode (no rseq): the same
// operation on the same slot with the same result, made atomic without critical sections.
//
// add is one atomic instruction (lock xadd). Every other operation takes a striped spinlock
// chosen by the address of `v`, so all of them serialize on one word as they would on one CPU in
// rseq mode (no ABA between a pop and a compare_store that detaches and re-pushes the head).
// Signals are blocked while a stripe is held, so a signal handler using the same structure
// cannot deadlock on it, and fork() takes every stripe first (pthread_atfork), so a child never
// inherits a held one. They commit with a compare-and-swap, so a concurrent add on the same word
// is never lost. Results: committed or compare_failed, never aborted or index_changed.
#pragma once

#if !defined(PERCPU_PUBLIC_HEADER) && !defined(PERCPU_BUILDING)
#error "<percpu/internal/fallback.h> is internal: include <percpu/percpu.h>"
#endif

#include <cstddef>
#include <cstdint>

#include "percpu/internal/config.h"
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
PERCPU_API status fallback_compare_pop(std::intptr_t* v, std::intptr_t expect, std::intptr_t* v2,
                                       std::intptr_t expect2, std::ptrdiff_t offset,
                                       std::intptr_t* out) noexcept;
PERCPU_API status fallback_compare_push(std::intptr_t* v, std::intptr_t* v2, std::intptr_t expect2,
                                        std::ptrdiff_t offset, std::intptr_t item) noexcept;
PERCPU_API status fallback_array_push(std::intptr_t* count, std::uintptr_t limit,
                                      std::intptr_t* base, std::intptr_t value) noexcept;
PERCPU_API status fallback_array_pop(std::intptr_t* count, std::uintptr_t limit,
                                     std::intptr_t* base, std::intptr_t* out) noexcept;
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
