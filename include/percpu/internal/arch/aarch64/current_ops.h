// aarch64 current-index sections: the operations of ../x86_64/current_ops.h (same head, same
// pseudocode, same results, read there for the rules), in arm64 assembly.
//
// Memory order, as in ops.h: a commit that publishes something (the lock's store, a push) is a
// store-release (stlr); the stack pop commits its lowered count with a store-release too, so the
// entry's load is ordered before a push that sees the lowered count can overwrite it; the list
// pop reads the item's link through the head it loaded (an address dependency) and publishes
// nothing; add commits with a plain store.
//
// Registers: x10 the area (thread pointer + off), x9 the scratch of the arming store, the bound
// check and the delay injection, x11 the index, x12 and x14 the bodies' scratch; the slot is
// an output register.
#pragma once

#if !defined(PERCPU_PUBLIC_HEADER) && !defined(PERCPU_BUILDING)
#error "<percpu/internal/arch/aarch64/current_ops.h> is internal: include <percpu/percpu.h>"
#endif

#include <cstddef>
#include <cstdint>

#include "percpu/abi.h"
#include "percpu/internal/arch/aarch64/ops.h"
#include "percpu/internal/arch/aarch64/sections.h"
#include "percpu/internal/current_result.h"
#include "percpu/runtime.h"

namespace percpu::arch {

/// mm_cid mode's sections check here that the area is registered (cpu_id >= 0, after the
/// offset, inside the head: two instructions). The x86-64 ones leave the check to their caller,
/// which hoists it out of its loop (if_area_registered()); GCC for aarch64 hoisted it for one
/// slot layout only and recomputed it, five instructions, for the other.
inline constexpr bool kSectionsCheckRegistration = true;

// The head (pseudocode in ../x86_64/current_ops.h); `exits` lists further early exits, `keep`
// runs after the checks with the index in x11.
#define PERCPU_A64_CURRENT_HEAD(exits, keep) \
  PERCPU_RSEQ_DESCRIPTOR("3", "1", "2", "4") \
  PERCPU_RSEQ_EXIT_POINT("1", "%l[slow]")    \
  exits PERCPU_A64_AREA                      \
  ".if %[registered]\n\t"                    \
  "ldr w9, [x10, 4]\n\t"                     \
  "tbnz w9, 31, %l[slow]\n\t"                \
  ".endif\n\t" PERCPU_A64_ARM_SECTION("3")   \
  "1:\n\t"                                   \
  "ldr w11, [x10, %[field]]\n\t"             \
  "ldr w9, %[bound]\n\t"                     \
  "cmp w11, w9\n\t"                          \
  "b.hs %l[slow]\n\t" PERCPU_A64_INJECT(1) keep \
  ".if %[shift]\n\t"                        \
  "add %[slot], %[base], x11, lsl %[shift]\n\t" \
  ".else\n\t"                               \
  "madd %[slot], x11, %[stride], %[base]\n\t" \
  ".endif\n\t"

#define PERCPU_A64_CURRENT_OPERANDS(off, t)                                              \
  [off] "r"(off), [field] "i"(Field), [registered] "i"(Field == abi::kOffCpuId ? 0 : 1), \
      [bound] "Q"(::percpu::detail::current_bound<Field>()), [shift] "i"(Shift),         \
      [stride] "rZ"(Shift != 0 ? std::uintptr_t{0} : (t).stride),                        \
      [base] "r"((t).base)PERCPU_A64_INJECT_OPERAND

#define PERCPU_A64_CURRENT_CLOBBERS "x9", "x10", "x11", "x12", "x14", "memory", "cc"
#define PERCPU_A64_MISS_EXIT PERCPU_RSEQ_EXIT_POINT("1", "%l[miss]")

/// add: *slot += count.
template <std::uint32_t Field, unsigned Shift = 0>
PERCPU_ALWAYS_INLINE current_result current_add(std::intptr_t off, slot_table t,
                                                std::intptr_t count) noexcept {
  std::uintptr_t slot;
  asm volatile goto(PERCPU_A64_CURRENT_HEAD("", "")
                    "ldr x12, [%[slot]]\n\t"
                    "add x12, x12, %[count]\n\t" PERCPU_A64_INJECT(3)
                    "str x12, [%[slot]]\n\t" PERCPU_A64_SECTION_TAIL
                    : [slot] "=&r"(slot)
                    : PERCPU_A64_CURRENT_OPERANDS(off, t), [count] "r"(count)
                    : PERCPU_A64_CURRENT_CLOBBERS
                    : aborted, slow);
  PERCPU_CURRENT_RESULTS
}

/// gated add: *slot += count while the shared word *gate is 0; miss when it is not. The gate's
/// load is a plain one: the caller orders what follows (percpu_rwsem's acquire fence).
template <std::uint32_t Field, unsigned Shift = 0>
PERCPU_ALWAYS_INLINE current_result current_gated_add(std::intptr_t off, slot_table t,
                                                      const std::intptr_t* gate,
                                                      std::intptr_t count) noexcept {
  std::uintptr_t slot;
  asm volatile goto(PERCPU_A64_CURRENT_HEAD(PERCPU_A64_MISS_EXIT, "")
                    "ldr x12, [%[gate]]\n\t"
                    "cbnz x12, %l[miss]\n\t"
                    "ldr x12, [%[slot]]\n\t"
                    "add x12, x12, %[count]\n\t" PERCPU_A64_INJECT(3)
                    "str x12, [%[slot]]\n\t" PERCPU_A64_SECTION_TAIL
                    : [slot] "=&r"(slot)
                    : PERCPU_A64_CURRENT_OPERANDS(off, t), [gate] "r"(gate), [count] "r"(count)
                    : PERCPU_A64_CURRENT_CLOBBERS
                    : aborted, slow, miss);
  PERCPU_CURRENT_RESULTS_WITH_MISS
}

/// bounded add: *slot += count while the shared word *gate is 0 and the new value stays within
/// [low, low + span]; miss otherwise. The pseudocode is x86_64/current_ops.h's.
template <std::uint32_t Field, unsigned Shift = 0>
PERCPU_ALWAYS_INLINE current_result current_bounded_add(std::intptr_t off, slot_table t,
                                                        const std::intptr_t* gate,
                                                        std::intptr_t count, std::intptr_t low,
                                                        std::uintptr_t span) noexcept {
  std::uintptr_t slot;
  asm volatile goto(PERCPU_A64_CURRENT_HEAD(PERCPU_A64_MISS_EXIT, "")
                    "ldr x12, [%[gate]]\n\t"
                    "cbnz x12, %l[miss]\n\t"
                    "ldr x12, [%[slot]]\n\t"
                    "add x12, x12, %[count]\n\t"
                    "sub x9, x12, %[low]\n\t"
                    "cmp x9, %[span]\n\t"
                    "b.hi %l[miss]\n\t" PERCPU_A64_INJECT(3)
                    "str x12, [%[slot]]\n\t" PERCPU_A64_SECTION_TAIL
                    : [slot] "=&r"(slot)
                    : PERCPU_A64_CURRENT_OPERANDS(off, t), [gate] "r"(gate), [count] "r"(count),
                      [low] "r"(low), [span] "r"(span)
                    : PERCPU_A64_CURRENT_CLOBBERS
                    : aborted, slow, miss);
  PERCPU_CURRENT_RESULTS_WITH_MISS
}

/// gated take: v = *slot, *slot = 0 while the shared word *gate is 0; miss when it is not.
/// The pseudocode is x86_64/current_ops.h's.
template <std::uint32_t Field, unsigned Shift = 0>
PERCPU_ALWAYS_INLINE current_result current_gated_take(std::intptr_t off, slot_table t,
                                                       const std::intptr_t* gate,
                                                       std::intptr_t& taken) noexcept {
  std::uintptr_t slot, v;
  asm volatile goto(PERCPU_A64_CURRENT_HEAD(PERCPU_A64_MISS_EXIT, "")
                    "ldr x12, [%[gate]]\n\t"
                    "cbnz x12, %l[miss]\n\t"
                    "ldr %[v], [%[slot]]\n\t" PERCPU_A64_INJECT(3)
                    "str xzr, [%[slot]]\n\t" PERCPU_A64_SECTION_TAIL
                    : [slot] "=&r"(slot), [v] "=&r"(v)
                    : PERCPU_A64_CURRENT_OPERANDS(off, t), [gate] "r"(gate)
                    : PERCPU_A64_CURRENT_CLOBBERS
                    : aborted, slow, miss);
  taken = static_cast<std::intptr_t>(v);
  PERCPU_CURRENT_RESULTS_WITH_MISS
}

/// capped add: the bounded add, also only while the shared word *word is at most `cap`
/// (signed). The pseudocode is x86_64/current_ops.h's.
template <std::uint32_t Field, unsigned Shift = 0>
PERCPU_ALWAYS_INLINE current_result current_capped_add(std::intptr_t off, slot_table t,
                                                       const std::intptr_t* gate,
                                                       const std::intptr_t* word, std::intptr_t cap,
                                                       std::intptr_t count, std::intptr_t low,
                                                       std::uintptr_t span) noexcept {
  std::uintptr_t slot;
  asm volatile goto(PERCPU_A64_CURRENT_HEAD(PERCPU_A64_MISS_EXIT, "")
                    "ldr x12, [%[gate]]\n\t"
                    "cbnz x12, %l[miss]\n\t"
                    "ldr x12, [%[word]]\n\t"
                    "cmp x12, %[cap]\n\t"
                    "b.gt %l[miss]\n\t"
                    "ldr x12, [%[slot]]\n\t"
                    "add x12, x12, %[count]\n\t"
                    "sub x9, x12, %[low]\n\t"
                    "cmp x9, %[span]\n\t"
                    "b.hi %l[miss]\n\t" PERCPU_A64_INJECT(3)
                    "str x12, [%[slot]]\n\t" PERCPU_A64_SECTION_TAIL
                    : [slot] "=&r"(slot)
                    : PERCPU_A64_CURRENT_OPERANDS(off, t), [gate] "r"(gate), [word] "r"(word),
                      [cap] "r"(cap), [count] "r"(count), [low] "r"(low), [span] "r"(span)
                    : PERCPU_A64_CURRENT_CLOBBERS
                    : aborted, slow, miss);
  PERCPU_CURRENT_RESULTS_WITH_MISS
}

/// compare-and-store: if (*slot == expect) *slot = newv (store-release); on commit, `word` is
/// the slot and `index` the index.
template <std::uint32_t Field, unsigned Shift = 0>
PERCPU_ALWAYS_INLINE current_result current_compare_store(std::intptr_t off, slot_table t,
                                                          std::intptr_t expect, std::intptr_t newv,
                                                          std::intptr_t*& word,
                                                          int& index) noexcept {
  std::uintptr_t slot;
  std::uint32_t at;
  asm volatile goto(PERCPU_A64_CURRENT_HEAD(PERCPU_A64_MISS_EXIT, "mov %w[at], w11\n\t")
                    "ldr x12, [%[slot]]\n\t"
                    "cmp x12, %[expect]\n\t"
                    "b.ne %l[miss]\n\t" PERCPU_A64_INJECT(3)
                    "stlr %[newv], [%[slot]]\n\t" PERCPU_A64_SECTION_TAIL
                    : [slot] "=&r"(slot), [at] "=&r"(at)
                    : PERCPU_A64_CURRENT_OPERANDS(off, t), [expect] "r"(expect), [newv] "r"(newv)
                    : PERCPU_A64_CURRENT_CLOBBERS
                    : aborted, slow, miss);
  word = reinterpret_cast<std::intptr_t*>(slot);
  index = static_cast<int>(at);
  PERCPU_CURRENT_RESULTS_WITH_MISS
}

/// free-list pop, slot {head, gate}: slow when the gate is closed, miss when the list is empty.
template <std::uint32_t Field, unsigned Shift = 0>
PERCPU_ALWAYS_INLINE current_result current_compare_pop(std::intptr_t off, slot_table t,
                                                        std::ptrdiff_t offset,
                                                        std::intptr_t& item) noexcept {
  std::uintptr_t slot;
  std::intptr_t head, next;
  asm volatile goto(PERCPU_A64_CURRENT_HEAD(PERCPU_A64_MISS_EXIT, "")
                    "ldr x12, [%[slot], 8]\n\t"
                    "cbnz x12, %l[slow]\n\t"
                    "ldr %[head], [%[slot]]\n\t"
                    "cbz %[head], %l[miss]\n\t" PERCPU_A64_INJECT(2)
                    "ldr %[next], [%[head], %[offset]]\n\t" PERCPU_A64_INJECT(3)
                    "str %[next], [%[slot]]\n\t" PERCPU_A64_SECTION_TAIL
                    : [slot] "=&r"(slot), [head] "=&r"(head), [next] "=&r"(next)
                    : PERCPU_A64_CURRENT_OPERANDS(off, t), [offset] "r"(offset)
                    : PERCPU_A64_CURRENT_CLOBBERS
                    : aborted, slow, miss);
  item = head;
  PERCPU_CURRENT_RESULTS_WITH_MISS
}

/// free-list push, slot {head, gate}: slow when the gate is closed; the store-release commit
/// publishes the item's link.
template <std::uint32_t Field, unsigned Shift = 0>
PERCPU_ALWAYS_INLINE current_result current_compare_push(std::intptr_t off, slot_table t,
                                                         std::ptrdiff_t offset,
                                                         std::intptr_t item) noexcept {
  std::uintptr_t slot;
  asm volatile goto(PERCPU_A64_CURRENT_HEAD("", "")
                    "ldr x12, [%[slot], 8]\n\t"
                    "cbnz x12, %l[slow]\n\t"
                    "ldr x12, [%[slot]]\n\t" PERCPU_A64_INJECT(2)
                    "str x12, [%[item], %[offset]]\n\t" PERCPU_A64_INJECT(3)
                    "stlr %[item], [%[slot]]\n\t" PERCPU_A64_SECTION_TAIL
                    : [slot] "=&r"(slot)
                    : PERCPU_A64_CURRENT_OPERANDS(off, t), [offset] "r"(offset), [item] "r"(item)
                    : PERCPU_A64_CURRENT_CLOBBERS
                    : aborted, slow);
  PERCPU_CURRENT_RESULTS
}

/// array-stack push, slot {count, entries}: slow when closed (kCountClosedBit set), miss when
/// full; the store-release commit publishes the entry. (The two tests branch straight to the
/// C labels: a conditional branch reaches only 1 MiB, too little for the abort section.)
template <std::uint32_t Field>
PERCPU_ALWAYS_INLINE current_result current_array_push(std::intptr_t off, slot_table t,
                                                       std::uintptr_t limit,
                                                       std::intptr_t value) noexcept {
  constexpr unsigned Shift = 0;  // stacks live in region tables: the stride is multiplied
  std::uintptr_t slot;
  asm volatile goto(PERCPU_A64_CURRENT_HEAD(PERCPU_A64_MISS_EXIT, "")
                    "ldr x12, [%[slot]]\n\t"
                    "tbnz x12, %[closed_bit], %l[slow]\n\t"
                    "cmp x12, %[limit]\n\t"
                    "b.hs %l[miss]\n\t" PERCPU_A64_INJECT(2)
                    "add x14, %[slot], x12, lsl 3\n\t"
                    "str %[value], [x14, 8]\n\t"
                    "add x12, x12, 1\n\t" PERCPU_A64_INJECT(3)
                    "stlr x12, [%[slot]]\n\t" PERCPU_A64_SECTION_TAIL
                    : [slot] "=&r"(slot)
                    : PERCPU_A64_CURRENT_OPERANDS(off, t), [limit] "r"(limit), [value] "r"(value),
                      [closed_bit] "i"(kCountClosedBit)
                    : PERCPU_A64_CURRENT_CLOBBERS
                    : aborted, slow, miss);
  PERCPU_CURRENT_RESULTS_WITH_MISS
}

/// array-stack pop, slot {count, entries}: miss when empty, slow when closed; the lowered count
/// is committed with a store-release.
template <std::uint32_t Field>
PERCPU_ALWAYS_INLINE current_result current_array_pop(std::intptr_t off, slot_table t,
                                                      std::intptr_t& out) noexcept {
  constexpr unsigned Shift = 0;  // stacks live in region tables: the stride is multiplied
  std::uintptr_t slot;
  std::intptr_t top;
  asm volatile goto(PERCPU_A64_CURRENT_HEAD(PERCPU_A64_MISS_EXIT, "")
                    "ldr x12, [%[slot]]\n\t"
                    "cbz x12, %l[miss]\n\t"
                    "tbnz x12, %[closed_bit], %l[slow]\n\t"
                    "sub x12, x12, 1\n\t" PERCPU_A64_INJECT(2)
                    "add x14, %[slot], x12, lsl 3\n\t"
                    "ldr %[top], [x14, 8]\n\t" PERCPU_A64_INJECT(3)
                    "stlr x12, [%[slot]]\n\t" PERCPU_A64_SECTION_TAIL
                    : [slot] "=&r"(slot), [top] "=&r"(top)
                    : PERCPU_A64_CURRENT_OPERANDS(off, t), [closed_bit] "i"(kCountClosedBit)
                    : PERCPU_A64_CURRENT_CLOBBERS
                    : aborted, slow, miss);
  out = top;
  PERCPU_CURRENT_RESULTS_WITH_MISS
}

/// record-stack push, slot {count, records of RecordStride bytes} (pseudocode in
/// ../x86_64/current_ops.h): the store-release commit publishes the copy.
template <std::uint32_t Field, std::size_t RecordStride>
PERCPU_ALWAYS_INLINE current_result current_memcpy_push(std::intptr_t off, slot_table t,
                                                        std::uintptr_t limit, const void* src,
                                                        std::size_t len) noexcept {
  constexpr unsigned Shift = 0;  // stacks live in region tables: the stride is multiplied
  std::uintptr_t slot;
  asm volatile goto(PERCPU_A64_CURRENT_HEAD(PERCPU_A64_MISS_EXIT, "")
                    "ldr x15, [%[slot]]\n\t"
                    "tbnz x15, %[closed_bit], %l[slow]\n\t"
                    "cmp x15, %[limit]\n\t"
                    "b.hs %l[miss]\n\t" PERCPU_A64_INJECT(2)
                    "madd x12, x15, %[rs], %[slot]\n\t"
                    "add x12, x12, 8\n\t"
                    "mov x11, %[src]\n\t" PERCPU_A64_COPY_LOOP
                    "add x15, x15, 1\n\t" PERCPU_A64_INJECT(3)
                    "stlr x15, [%[slot]]\n\t" PERCPU_A64_SECTION_TAIL
                    : [slot] "=&r"(slot)
                    : PERCPU_A64_CURRENT_OPERANDS(off, t), [limit] "r"(limit), [src] "r"(src),
                      [len] "r"(len), [rs] "r"(RecordStride), [closed_bit] "i"(kCountClosedBit)
                    : PERCPU_A64_CURRENT_CLOBBERS, "x13", "x15"
                    : aborted, slow, miss);
  PERCPU_CURRENT_RESULTS_WITH_MISS
}

/// record-stack pop, slot {count, records of RecordStride bytes} (pseudocode in
/// ../x86_64/current_ops.h): the lowered count is committed with a store-release, so the copy's
/// loads are ordered before a push that sees it can overwrite the record.
template <std::uint32_t Field, std::size_t RecordStride>
PERCPU_ALWAYS_INLINE current_result current_memcpy_pop(std::intptr_t off, slot_table t, void* dst,
                                                       std::size_t len) noexcept {
  constexpr unsigned Shift = 0;  // stacks live in region tables: the stride is multiplied
  std::uintptr_t slot;
  asm volatile goto(PERCPU_A64_CURRENT_HEAD(PERCPU_A64_MISS_EXIT, "")
                    "ldr x15, [%[slot]]\n\t"
                    "cbz x15, %l[miss]\n\t"
                    "tbnz x15, %[closed_bit], %l[slow]\n\t"
                    "sub x15, x15, 1\n\t" PERCPU_A64_INJECT(2)
                    "madd x11, x15, %[rs], %[slot]\n\t"
                    "add x11, x11, 8\n\t"
                    "mov x12, %[dst]\n\t" PERCPU_A64_COPY_LOOP PERCPU_A64_INJECT(3)
                    "stlr x15, [%[slot]]\n\t" PERCPU_A64_SECTION_TAIL
                    : [slot] "=&r"(slot)
                    : PERCPU_A64_CURRENT_OPERANDS(off, t), [dst] "r"(dst), [len] "r"(len),
                      [rs] "r"(RecordStride), [closed_bit] "i"(kCountClosedBit)
                    : PERCPU_A64_CURRENT_CLOBBERS, "x13", "x15"
                    : aborted, slow, miss);
  PERCPU_CURRENT_RESULTS_WITH_MISS
}

#undef PERCPU_A64_CURRENT_HEAD
#undef PERCPU_A64_CURRENT_OPERANDS
#undef PERCPU_A64_CURRENT_CLOBBERS
#undef PERCPU_A64_MISS_EXIT

}  // namespace percpu::arch
