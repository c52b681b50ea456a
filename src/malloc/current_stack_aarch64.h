// aarch64 critical sections on the stack of whichever index the thread runs on, for percpu
// malloc's per-CPU caches: the operations and layout of ../x86_64/current_stack.h (read there
// for the rules, including why these sections leave rseq_cs armed), in arm64 assembly. The push
// commits with a store-release, so the entry it wrote is visible to whoever sees the count.
#pragma once

#include <cstddef>
#include <cstdint>

#include "percpu/internal/arch/aarch64/sections.h"
#include "percpu/internal/current_result.h"
#include "percpu/runtime.h"

namespace percpu::arch {

// Head of both sections: descriptor, area (x10), the registration check (cpu_id negative),
// arming store, the index check against mm_cid mode's section bound (as on x86-64), r = first +
// index * RegionBytes into x11 and its count into x12.
#define PERCPU_A64_CURRENT_STACK_HEAD        \
  PERCPU_RSEQ_DESCRIPTOR("3", "1", "2", "4") \
  PERCPU_RSEQ_EXIT_POINT("1", "%l[slow]")    \
  PERCPU_A64_AREA                            \
  "ldr w9, [x10, 4]\n\t"                     \
  "tbnz w9, 31, %l[slow]\n\t"                \
  PERCPU_A64_ARM_SECTION("3")                \
  "1:\n\t" PERCPU_A64_INJECT(1)              \
  "sub x11, x10, %[off]\n\t"                 \
  "ldr w11, [x11, %[index_off]]\n\t"         \
  "ldr w9, %[bound]\n\t"                     \
  "cmp w11, w9\n\t"                          \
  "b.hs %l[slow]\n\t"                        \
  "madd x11, x11, %[rb], %[first]\n\t"       \
  "ldr x12, [x11]\n\t"

#define PERCPU_A64_CURRENT_STACK_TAIL \
  "2:\n\t" PERCPU_A64_ABORT_HANDLER("4") "b %l[aborted]\n\t"                  \
  ".popsection\n\t"

/// Pops the top entry of the calling thread's index's stack into `out` (pseudocode in
/// ../x86_64/current_stack.h). `index_off` is the index field's offset from the thread pointer.
template <std::size_t RegionBytes>
inline current_result current_stack_pop(std::intptr_t off, std::intptr_t index_off,
                                        std::intptr_t* first, std::intptr_t& out) noexcept {
  std::intptr_t v;
  asm volatile goto(
      PERCPU_A64_CURRENT_STACK_HEAD
      "sub x13, x12, 1\n\t"
      "cmp x13, %[max]\n\t"
      "b.hs %l[slow]\n\t"
      "ldr %[v], [x11, x12, lsl 3]\n\t" PERCPU_A64_INJECT(
          3) "str x13, [x11]\n\t" PERCPU_A64_CURRENT_STACK_TAIL
      : [v] "=&r"(v)
      : [off] "r"(off), [first] "r"(first), [rb] "r"(RegionBytes), [index_off] "r"(index_off),
        [bound] "Q"(::percpu::detail::g_hot.mm_section_bound),
        [max] "r"(std::uint64_t{kMaxStackCount})PERCPU_A64_INJECT_OPERAND
      : "x9", "x10", "x11", "x12", "x13", "memory", "cc"
      : slow, aborted);
  out = v;
  return current_result::committed;
slow:
  return current_result::slow;
aborted:
  return current_result::aborted;
}

/// Pushes `value` onto the calling thread's index's stack if its count is below the capacity
/// word `cap_offset` bytes from the count (pseudocode in ../x86_64/current_stack.h).
template <std::size_t RegionBytes>
inline current_result current_stack_push(std::intptr_t off, std::intptr_t index_off,
                                         std::intptr_t* first, std::intptr_t cap_offset,
                                         std::intptr_t value) noexcept {
  asm volatile goto(PERCPU_A64_CURRENT_STACK_HEAD
           "ldr x13, [x11, %[cap_offset]]\n\t"
           "cmp x12, x13\n\t"
           "b.hs %l[slow]\n\t"
           "add x13, x11, x12, lsl 3\n\t"
           "str %[value], [x13, 8]\n\t"
           PERCPU_A64_INJECT(3)
           "add x12, x12, 1\n\t"
           "stlr x12, [x11]\n\t"
           PERCPU_A64_CURRENT_STACK_TAIL
           :
           : [off] "r"(off), [first] "r"(first), [rb] "r"(RegionBytes), [index_off] "r"(index_off),
             [bound] "Q"(::percpu::detail::g_hot.mm_section_bound), [cap_offset] "r"(cap_offset),
             [value] "r"(value)PERCPU_A64_INJECT_OPERAND
           : "x9", "x10", "x11", "x12", "x13", "memory", "cc"
           : slow, aborted);
  return current_result::committed;
slow:
  return current_result::slow;
aborted:
  return current_result::aborted;
}

#undef PERCPU_A64_CURRENT_STACK_HEAD
#undef PERCPU_A64_CURRENT_STACK_TAIL

}  // namespace percpu::arch
