// aarch64 per-CPU critical sections: the operations of ../x86_64/ops.h (same pseudocode, same
// statuses, no disarming store on any exit), in arm64 assembly.
//
// Memory order: aarch64 is weakly ordered. The commit of every store variant is a store-release
// (stlr), so whatever the section or the caller wrote before it (a try-store, a copy, a node's
// next pointer before a push) is visible to any thread that observes the commit; both
// commit_order variants of the generic layer therefore share these bodies. `add` publishes
// nothing and commits with a plain store; `pop` reads the node through the head it loaded
// (an address dependency orders the two loads).
//
// Every section is `asm volatile goto`, as on x86-64 (GCC drops an asm goto whose outputs go
// unused).
#pragma once

#if !defined(PERCPU_PUBLIC_HEADER) && !defined(PERCPU_BUILDING)
#error "<percpu/internal/arch/aarch64/ops.h> is internal: include <percpu/percpu.h>"
#endif

#include <cstddef>
#include <cstdint>

#include "percpu/internal/arch/aarch64/area.h"
#include "percpu/internal/arch/aarch64/sections.h"
#include "percpu/runtime.h"
#include "percpu/status.h"

namespace percpu::arch {

// Shared head: descriptor, early exit to `moved`, area address (x10, from the thread pointer in
// x13), arming store, index check and section-bound check (g_hot: the index space's size in
// rseq mode, 0 outside it). %[off] is the area's offset from the thread pointer, %[idxf] the
// index field's (idx + Field, see the x86-64 sections).
#define PERCPU_A64_SECTION_HEAD(more_exit_points) \
  PERCPU_RSEQ_DESCRIPTOR("3", "1", "2", "4")      \
  PERCPU_RSEQ_EXIT_POINT("1", "%l[moved]")        \
  more_exit_points "mrs x13, tpidr_el0\n\t"      \
  "add x10, x13, %[off]\n\t" PERCPU_A64_ARM_SECTION("3") \
  "1:\n\t"                                                       \
  "ldr w9, [x13, %[idxf]]\n\t"                                   \
  "cmp w9, %w[index]\n\t"                                        \
  "b.ne %l[moved]\n\t"                                           \
  "ldr w9, %[bound]\n\t"                                         \
  "cmp %w[index], w9\n\t"                                         \
  "b.hs %l[moved]\n\t" PERCPU_A64_INJECT(1)

#define PERCPU_A64_CMPFAIL_EXIT PERCPU_RSEQ_EXIT_POINT("1", "%l[cmpfail]")

// Commit label and abort handler (jumps to `aborted`).
#define PERCPU_A64_SECTION_TAIL \
  "2:\n\t" PERCPU_A64_ABORT_HANDLER("4") "b %l[aborted]\n\t"                  \
  ".popsection\n\t"

#define PERCPU_A64_HEAD_OPERANDS(off, index)                   \
  [off] "r"(off), [idxf] "r"(idx + Field), [index] "r"(index), \
      [bound] "Q"(::percpu::detail::section_bound<Field>())PERCPU_A64_INJECT_OPERAND

#define PERCPU_A64_CLOBBERS "x9", "x10", "x11", "x12", "x13", "x14", "memory", "cc"

/// add: *v += count (commit: the store of the sum).
template <std::uint32_t Field>
PERCPU_ALWAYS_INLINE status add(std::intptr_t off, std::intptr_t idx, std::intptr_t* v,
                                std::intptr_t count, int index) noexcept {
  asm volatile goto(PERCPU_A64_SECTION_HEAD("")
           "ldr x11, %[v]\n\t"
           "add x11, x11, %[count]\n\t"
           PERCPU_A64_INJECT(3)
           "str x11, %[v]\n\t"
           PERCPU_A64_SECTION_TAIL
           :
           : PERCPU_A64_HEAD_OPERANDS(off, index), [v] "Q"(*v), [count] "r"(count)
           : PERCPU_A64_CLOBBERS
           : aborted, moved);
  PERCPU_RETURN_STATUSES
}

/// compare-and-store: if (*v == expect) *v = newv.
template <std::uint32_t Field>
PERCPU_ALWAYS_INLINE status compare_store(std::intptr_t off, std::intptr_t idx, std::intptr_t* v,
                                          std::intptr_t expect, std::intptr_t newv,
                                          int index) noexcept {
  asm volatile goto(PERCPU_A64_SECTION_HEAD(PERCPU_A64_CMPFAIL_EXIT)
           "ldr x11, %[v]\n\t"
           "cmp x11, %[expect]\n\t"
           "b.ne %l[cmpfail]\n\t"
           PERCPU_A64_INJECT(3)
           "stlr %[newv], %[v]\n\t"
           PERCPU_A64_SECTION_TAIL
           :
           : PERCPU_A64_HEAD_OPERANDS(off, index), [v] "Q"(*v), [expect] "r"(expect),
             [newv] "r"(newv)
           : PERCPU_A64_CLOBBERS
           : aborted, moved, cmpfail);
  PERCPU_RETURN_STATUSES_WITH_CMPFAIL
}

/// compare-compare-and-store: if (*v == expect && *v2 == expect2) *v = newv.
template <std::uint32_t Field>
PERCPU_ALWAYS_INLINE status compare_compare_store(std::intptr_t off, std::intptr_t idx,
                                                  std::intptr_t* v, std::intptr_t expect,
                                                  std::intptr_t* v2, std::intptr_t expect2,
                                                  std::intptr_t newv, int index) noexcept {
  asm volatile goto(PERCPU_A64_SECTION_HEAD(PERCPU_A64_CMPFAIL_EXIT)
           "ldr x11, %[v]\n\t"
           "cmp x11, %[expect]\n\t"
           "b.ne %l[cmpfail]\n\t"
           PERCPU_A64_INJECT(2)
           "ldr x11, %[v2]\n\t"
           "cmp x11, %[expect2]\n\t"
           "b.ne %l[cmpfail]\n\t"
           PERCPU_A64_INJECT(3)
           "stlr %[newv], %[v]\n\t"
           PERCPU_A64_SECTION_TAIL
           :
           : PERCPU_A64_HEAD_OPERANDS(off, index), [v] "Q"(*v), [expect] "r"(expect),
             [v2] "Q"(*v2), [expect2] "r"(expect2), [newv] "r"(newv)
           : PERCPU_A64_CLOBBERS
           : aborted, moved, cmpfail);
  PERCPU_RETURN_STATUSES_WITH_CMPFAIL
}

/// free-list pop: if (*v != expect) { *out = *v; *v = *(*v + offset) } (commit: the store of
/// the next pointer; *out is written after the section).
template <std::uint32_t Field>
PERCPU_ALWAYS_INLINE status pop(std::intptr_t off, std::intptr_t idx, std::intptr_t* v,
                                std::intptr_t expect, std::ptrdiff_t offset, std::intptr_t* out,
                                int index) noexcept {
  asm volatile goto(PERCPU_A64_SECTION_HEAD(PERCPU_A64_CMPFAIL_EXIT)
           "ldr x11, %[v]\n\t"
           "cmp x11, %[expect]\n\t"
           "b.eq %l[cmpfail]\n\t"
           PERCPU_A64_INJECT(2)
           "ldr x12, [x11, %[offset]]\n\t"
           PERCPU_A64_INJECT(3)
           "str x12, %[v]\n\t"
           "2:\n\t"
           "str x11, %[out]\n\t"
           PERCPU_A64_ABORT_HANDLER("4") "b %l[aborted]\n\t"
           ".popsection\n\t"
           :
           : PERCPU_A64_HEAD_OPERANDS(off, index), [v] "Q"(*v), [expect] "r"(expect),
             [offset] "r"(offset), [out] "Q"(*out)
           : PERCPU_A64_CLOBBERS
           : aborted, moved, cmpfail);
  PERCPU_RETURN_STATUSES_WITH_CMPFAIL
}

/// compare, then free-list pop: if (*v2 == expect2 && *v != expect) { *out = *v; *v = next }.
template <std::uint32_t Field>
PERCPU_ALWAYS_INLINE status compare_pop(std::intptr_t off, std::intptr_t idx, std::intptr_t* v,
                                        std::intptr_t expect, std::intptr_t* v2,
                                        std::intptr_t expect2, std::ptrdiff_t offset,
                                        std::intptr_t* out, int index) noexcept {
  asm volatile goto(PERCPU_A64_SECTION_HEAD(PERCPU_A64_CMPFAIL_EXIT)
           "ldr x11, %[v2]\n\t"
           "cmp x11, %[expect2]\n\t"
           "b.ne %l[cmpfail]\n\t"
           "ldr x11, %[v]\n\t"
           "cmp x11, %[expect]\n\t"
           "b.eq %l[cmpfail]\n\t"
           PERCPU_A64_INJECT(2)
           "ldr x12, [x11, %[offset]]\n\t"
           PERCPU_A64_INJECT(3)
           "str x12, %[v]\n\t"
           "2:\n\t"
           "str x11, %[out]\n\t"
           PERCPU_A64_ABORT_HANDLER("4") "b %l[aborted]\n\t"
           ".popsection\n\t"
           :
           : PERCPU_A64_HEAD_OPERANDS(off, index), [v] "Q"(*v), [expect] "r"(expect),
             [v2] "Q"(*v2), [expect2] "r"(expect2), [offset] "r"(offset), [out] "Q"(*out)
           : PERCPU_A64_CLOBBERS
           : aborted, moved, cmpfail);
  PERCPU_RETURN_STATUSES_WITH_CMPFAIL
}

/// compare, then free-list push: if (*v2 == expect2) { *(item + offset) = *v; *v = item }
/// (the head is read inside the section; the store-release commit publishes the link store).
template <std::uint32_t Field>
PERCPU_ALWAYS_INLINE status compare_push(std::intptr_t off, std::intptr_t idx, std::intptr_t* v,
                                         std::intptr_t* v2, std::intptr_t expect2,
                                         std::ptrdiff_t offset, std::intptr_t item,
                                         int index) noexcept {
  asm volatile goto(PERCPU_A64_SECTION_HEAD(PERCPU_A64_CMPFAIL_EXIT)
           "ldr x11, %[v2]\n\t"
           "cmp x11, %[expect2]\n\t"
           "b.ne %l[cmpfail]\n\t"
           "ldr x11, %[v]\n\t"
           PERCPU_A64_INJECT(2)
           "str x11, [%[item], %[offset]]\n\t"
           PERCPU_A64_INJECT(3)
           "stlr %[item], %[v]\n\t"
           PERCPU_A64_SECTION_TAIL
           :
           : PERCPU_A64_HEAD_OPERANDS(off, index), [v] "Q"(*v), [v2] "Q"(*v2),
             [expect2] "r"(expect2), [offset] "r"(offset), [item] "r"(item)
           : PERCPU_A64_CLOBBERS
           : aborted, moved, cmpfail);
  PERCPU_RETURN_STATUSES_WITH_CMPFAIL
}

/// array-stack push: if (*count < limit) { base[*count] = value; *count += 1 } (the
/// store-release commit publishes the entry).
template <std::uint32_t Field>
PERCPU_ALWAYS_INLINE status array_push(std::intptr_t off, std::intptr_t idx, std::intptr_t* count,
                                       std::uintptr_t limit, std::intptr_t* base,
                                       std::intptr_t value, int index) noexcept {
  asm volatile goto(PERCPU_A64_SECTION_HEAD(PERCPU_A64_CMPFAIL_EXIT)
           "ldr x11, %[count]\n\t"
           "cmp x11, %[limit]\n\t"
           "b.hs %l[cmpfail]\n\t"
           PERCPU_A64_INJECT(2)
           "str %[value], [%[base], x11, lsl #3]\n\t"
           "add x11, x11, #1\n\t"
           PERCPU_A64_INJECT(3)
           "stlr x11, %[count]\n\t"
           PERCPU_A64_SECTION_TAIL
           :
           : PERCPU_A64_HEAD_OPERANDS(off, index), [count] "Q"(*count), [limit] "r"(limit),
             [base] "r"(base), [value] "r"(value)
           : PERCPU_A64_CLOBBERS
           : aborted, moved, cmpfail);
  PERCPU_RETURN_STATUSES_WITH_CMPFAIL
}

/// array-stack pop: if (*count - 1 < limit) { *count -= 1; *out = base[*count] } (commit: the
/// store-release of the lowered count, which orders the entry's load before it, so a push that
/// sees the lowered count cannot overwrite the entry before it is read; *out is written after
/// the section).
template <std::uint32_t Field>
PERCPU_ALWAYS_INLINE status array_pop(std::intptr_t off, std::intptr_t idx, std::intptr_t* count,
                                      std::uintptr_t limit, std::intptr_t* base, std::intptr_t* out,
                                      int index) noexcept {
  asm volatile goto(PERCPU_A64_SECTION_HEAD(PERCPU_A64_CMPFAIL_EXIT)
           "ldr x11, %[count]\n\t"
           "sub x11, x11, #1\n\t"
           "cmp x11, %[limit]\n\t"
           "b.hs %l[cmpfail]\n\t"
           PERCPU_A64_INJECT(2)
           "ldr x12, [%[base], x11, lsl #3]\n\t"
           PERCPU_A64_INJECT(3)
           "stlr x11, %[count]\n\t"
           "2:\n\t"
           "str x12, %[out]\n\t"
           PERCPU_A64_ABORT_HANDLER("4") "b %l[aborted]\n\t"
           ".popsection\n\t"
           :
           : PERCPU_A64_HEAD_OPERANDS(off, index), [count] "Q"(*count), [limit] "r"(limit),
             [base] "r"(base), [out] "Q"(*out)
           : PERCPU_A64_CLOBBERS
           : aborted, moved, cmpfail);
  PERCPU_RETURN_STATUSES_WITH_CMPFAIL
}

/// compare, try-store, store: if (*v == expect) { *v2 = newv2; *v = newv } (the store-release
/// commit publishes the try-store).
template <std::uint32_t Field>
PERCPU_ALWAYS_INLINE status compare_store_store(std::intptr_t off, std::intptr_t idx,
                                                std::intptr_t* v, std::intptr_t expect,
                                                std::intptr_t* v2, std::intptr_t newv2,
                                                std::intptr_t newv, int index) noexcept {
  asm volatile goto(PERCPU_A64_SECTION_HEAD(PERCPU_A64_CMPFAIL_EXIT)
           "ldr x11, %[v]\n\t"
           "cmp x11, %[expect]\n\t"
           "b.ne %l[cmpfail]\n\t"
           PERCPU_A64_INJECT(2)
           "str %[newv2], %[v2]\n\t"
           PERCPU_A64_INJECT(3)
           "stlr %[newv], %[v]\n\t"
           PERCPU_A64_SECTION_TAIL
           :
           : PERCPU_A64_HEAD_OPERANDS(off, index), [v] "Q"(*v), [expect] "r"(expect),
             [v2] "Q"(*v2), [newv2] "r"(newv2), [newv] "r"(newv)
           : PERCPU_A64_CLOBBERS
           : aborted, moved, cmpfail);
  PERCPU_RETURN_STATUSES_WITH_CMPFAIL
}

/// compare, copy, store: if (*v == expect) { memcpy(dst, src, len); *v = newv }. Copies 8 bytes
/// at a time, then the remaining 0-7 one at a time; the store-release commit publishes the copy.
template <std::uint32_t Field>
PERCPU_ALWAYS_INLINE status compare_memcpy_store(std::intptr_t off, std::intptr_t idx,
                                                 std::intptr_t* v, std::intptr_t expect, void* dst,
                                                 const void* src, std::size_t len,
                                                 std::intptr_t newv, int index) noexcept {
  asm volatile goto(PERCPU_A64_SECTION_HEAD(PERCPU_A64_CMPFAIL_EXIT)
           "ldr x11, %[v]\n\t"
           "cmp x11, %[expect]\n\t"
           "b.ne %l[cmpfail]\n\t"
           PERCPU_A64_INJECT(2)
           "mov x11, %[src]\n\t"
           "mov x12, %[dst]\n\t"
           PERCPU_A64_COPY_LOOP
           PERCPU_A64_INJECT(3)
           "stlr %[newv], %[v]\n\t"
           PERCPU_A64_SECTION_TAIL
           :
           : PERCPU_A64_HEAD_OPERANDS(off, index), [v] "Q"(*v), [expect] "r"(expect),
             [dst] "r"(dst), [src] "r"(src), [len] "r"(len), [newv] "r"(newv)
           : PERCPU_A64_CLOBBERS
           : aborted, moved, cmpfail);
  PERCPU_RETURN_STATUSES_WITH_CMPFAIL
}

}  // namespace percpu::arch
