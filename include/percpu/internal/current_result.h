// What every architecture's current-index sections share (the sections that read the calling
// thread's index inside themselves: x86_64/current_ops.h, x86_64/current_stack.h and their aarch64
// counterparts): where the slots are, the limit of a stack count, and the outcome of one section.
#pragma once

#if !defined(PERCPU_PUBLIC_HEADER) && !defined(PERCPU_BUILDING)
#error "<percpu/internal/current_result.h> is internal: include <percpu/percpu.h>"
#endif

#include <cstdint>

#include "percpu/internal/config.h"

namespace percpu::arch {

/// Where each index's slot lies: index i's at base + i * stride bytes. A current-index section
/// computes its slot from this once it has read the index; nothing is accessed through it
/// before the section has checked the index against the index space.
struct slot_table {
  std::uintptr_t base;
  std::uintptr_t stride;

  /// The slot of `index` as a word pointer (for the slow paths, which read the index themselves).
  std::intptr_t* words(int index) const noexcept {
    return reinterpret_cast<std::intptr_t*>(base + static_cast<std::uintptr_t>(index) * stride);
  }
};

/// Counts above this are not counts but a closed stack (kCountClosed): percpu malloc's sections
/// leave them to the generic operations, which wait for the drain.
inline constexpr std::uint32_t kMaxStackCount = 0xFFFFF;

/// The bit a remote drain sets in a stack's count to close it (detail::kCountClosed).
inline constexpr int kCountClosedBit = 62;

/// What a current-index section did.
enum class current_result {
  /// The commit store happened.
  committed,
  /// The operation's answer without effect, found inside the section: an empty list or stack, a
  /// full stack, a held lock. Nothing was stored.
  miss,
  /// The section cannot serve here; the caller's slow path (a full retry loop) must: not in rseq
  /// mode (the section bound is 0), an index beyond the index space, an unregistered area, a
  /// slot closed by a remote drain. Nothing was stored.
  slow,
  /// The kernel aborted the section (preemption, migration, signal). Nothing was stored.
  aborted,
};

}  // namespace percpu::arch

/// What every current-index section returns after its asm goto: committed when control falls
/// through, aborted from the abort handler, slow from the exits to the slow path. The last two
/// are cold labels, so that a caller's code after the commit (a lock's release) follows it
/// without a jump: GCC had put the slow path's call between them in some loops. Sections that
/// can miss use PERCPU_CURRENT_RESULTS_WITH_MISS.
#define PERCPU_CURRENT_RESULTS                      \
  return ::percpu::arch::current_result::committed; \
  aborted:                                          \
  PERCPU_COLD_LABEL                                 \
  return ::percpu::arch::current_result::aborted;   \
  slow:                                             \
  PERCPU_COLD_LABEL                                 \
  return ::percpu::arch::current_result::slow;

/// PERCPU_CURRENT_RESULTS plus the `miss:` exit: returns miss.
#define PERCPU_CURRENT_RESULTS_WITH_MISS \
  PERCPU_CURRENT_RESULTS                 \
  miss:                                  \
  return ::percpu::arch::current_result::miss;
