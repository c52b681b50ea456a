// x86-64 critical section that reads cpu_id and node_id as one consistent pair.
//
// Pseudocode:
//   retry:
//     area->rseq_cs = &descriptor          // arm the section
//   start:
//     cpu  = area->cpu_id
//     node = area->node_id
//   end:                                   // no store to commit: the loads are the section
//   abort (preempted/migrated/signalled between start and end):
//     if (--budget == 0) return failed; goto retry
// A migration between the two loads aborts the section, so the pair never mixes two CPUs.
#pragma once

#if !defined(PERCPU_PUBLIC_HEADER) && !defined(PERCPU_BUILDING)
#error "<percpu/internal/arch/x86_64/pair.h> is internal: include <percpu/percpu.h>"
#endif

#include <cstdint>

#include "percpu/abi.h"
#include "percpu/internal/arch/x86_64/area.h"
#include "percpu/internal/arch/x86_64/sections.h"

namespace percpu::arch {

/// Reads (cpu_id, node_id) in one critical section. Returns false after `budget` consecutive
/// aborts (a debugger stepping through), leaving the outputs unspecified.
inline bool read_cpu_node_pair(std::intptr_t rseq_offset, std::int32_t& cpu, std::int32_t& node,
                               std::uint32_t budget = 64) noexcept {
  std::int32_t c, n;
  asm volatile(
      PERCPU_RSEQ_DESCRIPTOR("3", "1", "2", "4")
      "5:\n\t"
      PERCPU_X86_ARM_SECTION("3", "%[off]")
      "1:\n\t"
      "movl %%fs:4(%[off]), %[cpu]\n\t"
      "movl %%fs:20(%[off]), %[node]\n\t"
      "2:\n\t"
      PERCPU_X86_ABORT_HANDLER("4")
      "decl %[budget]\n\t"
      "jnz 5b\n\t"
      "movl $-1, %[cpu]\n\t"
      "jmp 2b\n\t"
      ".popsection\n\t"
      : [cpu] "=&r"(c), [node] "=&r"(n), [budget] "+r"(budget)
      : [off] "r"(rseq_offset)
      : "rax", "memory", "cc");
  cpu = c;
  node = n;
  return c >= 0;
}

}  // namespace percpu::arch
