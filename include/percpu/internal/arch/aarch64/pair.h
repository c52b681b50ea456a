// aarch64 critical section that reads cpu_id and node_id as one consistent pair (the pseudocode
// is in ../x86_64/pair.h: arm, two loads, no commit store; an abort retries).
#pragma once

#if !defined(PERCPU_PUBLIC_HEADER) && !defined(PERCPU_BUILDING)
#error "<percpu/internal/arch/aarch64/pair.h> is internal: include <percpu/percpu.h>"
#endif

#include <cstdint>

#include "percpu/abi.h"
#include "percpu/internal/arch/aarch64/area.h"
#include "percpu/internal/arch/aarch64/sections.h"

namespace percpu::arch {

/// Reads (cpu_id, node_id) in one critical section. Returns false after `budget` consecutive
/// aborts (a debugger stepping through), leaving the outputs unspecified.
inline bool read_cpu_node_pair(std::intptr_t rseq_offset, std::int32_t& cpu, std::int32_t& node,
                               std::uint32_t budget = 64) noexcept {
  std::int32_t c, n;
  asm volatile(
      PERCPU_RSEQ_DESCRIPTOR("3", "1", "2", "4")
      PERCPU_A64_AREA
      "5:\n\t"
      PERCPU_A64_ARM_SECTION("3")
      "1:\n\t"
      "ldr %w[cpu], [x10, 4]\n\t"
      "ldr %w[node], [x10, 20]\n\t"
      "2:\n\t"
      PERCPU_A64_ABORT_HANDLER("4")
      // Only unconditional branches leave __rseq_failure: it may lie beyond a conditional
      // branch's 1 MiB reach from the text (a static link puts libc in between).
      "subs %w[budget], %w[budget], 1\n\t"
      "b.eq 6f\n\t"
      "b 5b\n\t"
      "6:\n\t"
      "mov %w[cpu], -1\n\t"
      "b 2b\n\t"
      ".popsection\n\t"
      : [cpu] "=&r"(c), [node] "=&r"(n), [budget] "+r"(budget)
      : [off] "r"(rseq_offset)
      : "x9", "x10", "memory", "cc");
  cpu = c;
  node = n;
  return c >= 0;
}

}  // namespace percpu::arch
