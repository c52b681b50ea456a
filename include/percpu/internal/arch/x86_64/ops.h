// x86-64 per-CPU critical sections. Each function is one attempt: it arms an rseq_cs descriptor
// (in the area `off` bytes from the thread pointer), checks that the thread is on `index` (the
// 32-bit field `idx + Field` bytes from the thread pointer: cpu_id, or mm_cid mode's field) and
// that the process is in rseq mode, does its work, and commits with one final store.
//
// The kernel restarts the thread at the abort handler if it is preempted, migrated or signalled
// between start and commit, so the body never sees another thread's half-done update on the same
// CPU. Nothing here stores to cpu_id_start, cpu_id, node_id or mm_cid; the only area store is
// the arming store to rseq_cs. Stores before the commit are allowed only to memory no other
// thread reads until the commit publishes it (the try-store and memcpy variants).
//
// No exit disarms the section: the kernel clears rseq_cs lazily once the thread is outside it
// (see PERCPU_RETURN_STATUSES; dlclose() of the code disarms it, unload_teardown.h).
//
// Every section is `asm volatile goto`: GCC 12 deletes an asm goto whose outputs go unused (a
// pop whose item the caller ignores would not pop), although its manual calls asm goto
// implicitly volatile.
//
// x86-64 is TSO: every store is a release store, so the _release variants of the generic layer
// share these bodies (the "memory" clobber keeps the compiler from moving accesses across).
#pragma once

#if !defined(PERCPU_PUBLIC_HEADER) && !defined(PERCPU_BUILDING)
#error "<percpu/internal/arch/x86_64/ops.h> is internal: include <percpu/percpu.h>"
#endif

#include <cstddef>
#include <cstdint>

#include "percpu/internal/arch/x86_64/area.h"
#include "percpu/internal/arch/x86_64/sections.h"
#include "percpu/runtime.h"
#include "percpu/status.h"

namespace percpu::arch {

// Shared head of every section: descriptor, early exit to `moved`, arming store, index check and
// section-bound check (g_hot: the index space's size in rseq mode, 0 outside it, so the one
// unsigned compare keeps slots inside the index space and stops sections once a switch to
// fallback mode has begun); `more_exit_points` lists further early exits. %[off] is the area's
// offset from the thread pointer, %[idx] + Field the index field's.
#define PERCPU_X86_SECTION_HEAD(more_exit_points) \
  PERCPU_RSEQ_DESCRIPTOR("3", "1", "2", "4")      \
  PERCPU_RSEQ_EXIT_POINT("1", "%l[moved]")        \
  more_exit_points PERCPU_X86_ARM_SECTION("3", "%[off]")                      \
  "1:\n\t"                                                                    \
  "cmpl %[index], %%fs:%c[field](%[idx])\n\t"                                 \
  "jnz %l[moved]\n\t"                                                         \
  "cmpl %[bound], %[index]\n\t"                                               \
  "jae %l[moved]\n\t" PERCPU_X86_INJECT(1)

#define PERCPU_X86_CMPFAIL_EXIT PERCPU_RSEQ_EXIT_POINT("1", "%l[cmpfail]")

#define PERCPU_X86_HEAD_OPERANDS(off, index)                              \
  [off] "r"(off), [idx] "r"(idx), [index] "r"(index), [field] "i"(Field), \
      [bound] "m"(::percpu::detail::section_bound<Field>())PERCPU_X86_INJECT_OPERAND

// A list item's next pointer, `offset` bytes from the item whose address is in operand `item`.
// When the offset is a compile-time constant after inlining (the usual case: the offsetof of a
// link member), it is the displacement of the access, as a hand-written sequence has it; an
// access through base plus index register measured 15-20% slower on a pop+push (Sapphire
// Rapids: a pointer chase through a base-only address is one cycle shorter on Intel cores).
// Otherwise it is an index register. GCC folds __builtin_constant_p only when it optimizes, so
// unoptimized builds always take the register form, whose "r" constraint any value meets.
// One case escapes that test: a function marked __attribute__((optimize("O0"))) in an optimized
// translation unit still sees __OPTIMIZE__ but does not fold, and GCC then rejects the constant
// form ("impossible constraint in asm"). Define PERCPU_NO_LINK_DISPLACEMENT before including
// percpu there (or use #pragma GCC optimize, which updates __OPTIMIZE__).
#define PERCPU_X86_LINK_CONST(item) "%c[offset](%[" item "])"
#define PERCPU_X86_LINK_REG(item) "(%[" item "], %[offset], 1)"
#if defined(__OPTIMIZE__) && !defined(PERCPU_NO_LINK_DISPLACEMENT)
#define PERCPU_X86_IS_CONSTANT(x) __builtin_constant_p(x)
#else
#define PERCPU_X86_IS_CONSTANT(x) false
#endif
/// Expands `section(link, offset_constraint)`, an asm statement that reaches a link through
/// `link("reg")` with an operand [offset], in the form the function's `offset` allows.
#define PERCPU_X86_WITH_LINK(section)    \
  if (PERCPU_X86_IS_CONSTANT(offset)) {  \
    section(PERCPU_X86_LINK_CONST, "i"); \
  } else {                               \
    section(PERCPU_X86_LINK_REG, "r");   \
  }

/// add: *v += count.
///
///   if (area->index != index || index >= bound) return index_changed
///   *v += count                              // commit (one read-modify-write instruction)
template <std::uint32_t Field>
PERCPU_ALWAYS_INLINE status add(std::intptr_t off, std::intptr_t idx, std::intptr_t* v,
                                std::intptr_t count, int index) noexcept {
  asm volatile goto(PERCPU_X86_SECTION_HEAD("")
                        PERCPU_X86_INJECT(3) "addq %[count], (%[v])\n\t" PERCPU_X86_SECTION_TAIL
                    :
                    : PERCPU_X86_HEAD_OPERANDS(off, index), [v] "r"(v), [count] "er"(count)
                    : "rax", "memory", "cc"
                    : aborted, moved);
  PERCPU_RETURN_STATUSES
}

/// compare-and-store: if (*v == expect) *v = newv.
///
///   if (area->index != index || index >= bound) return index_changed
///   if (*v != expect) return compare_failed
///   *v = newv                                // commit
template <std::uint32_t Field>
PERCPU_ALWAYS_INLINE status compare_store(std::intptr_t off, std::intptr_t idx, std::intptr_t* v,
                                          std::intptr_t expect, std::intptr_t newv,
                                          int index) noexcept {
  asm volatile goto(PERCPU_X86_SECTION_HEAD(PERCPU_X86_CMPFAIL_EXIT)
           "cmpq %[expect], (%[v])\n\t"
           "jnz %l[cmpfail]\n\t"
           PERCPU_X86_INJECT(3)
           "movq %[newv], (%[v])\n\t"
           PERCPU_X86_SECTION_TAIL
           :
           : PERCPU_X86_HEAD_OPERANDS(off, index), [v] "r"(v), [expect] "er"(expect),
             [newv] "er"(newv)
           : "rax", "memory", "cc"
           : aborted, moved, cmpfail);
  PERCPU_RETURN_STATUSES_WITH_CMPFAIL
}

/// compare-compare-and-store: if (*v == expect && *v2 == expect2) *v = newv.
/// (A list's pop_all compares the head it read and the open gate; a pop that reads a value
/// outside the section can compare it too, so that a pop and a push of another value in between
/// cannot be mistaken for no change.)
template <std::uint32_t Field>
PERCPU_ALWAYS_INLINE status compare_compare_store(std::intptr_t off, std::intptr_t idx,
                                                  std::intptr_t* v, std::intptr_t expect,
                                                  std::intptr_t* v2, std::intptr_t expect2,
                                                  std::intptr_t newv, int index) noexcept {
  asm volatile goto(PERCPU_X86_SECTION_HEAD(PERCPU_X86_CMPFAIL_EXIT)
           "cmpq (%[v]), %[expect]\n\t"
           "jnz %l[cmpfail]\n\t"
           PERCPU_X86_INJECT(2)
           "cmpq (%[v2]), %[expect2]\n\t"
           "jnz %l[cmpfail]\n\t"
           PERCPU_X86_INJECT(3)
           "movq %[newv], (%[v])\n\t"
           PERCPU_X86_SECTION_TAIL
           :
           : PERCPU_X86_HEAD_OPERANDS(off, index), [v] "r"(v), [expect] "r"(expect),
             [v2] "r"(v2), [expect2] "r"(expect2), [newv] "r"(newv)
           : "rax", "memory", "cc"
           : aborted, moved, cmpfail);
  PERCPU_RETURN_STATUSES_WITH_CMPFAIL
}

/// free-list pop: if (*v != expect) { *out = *v; *v = *(*v + offset) }.
///
///   if (area->index != index || index >= bound) return index_changed
///   head = *v
///   if (head == expect) return compare_failed  // e.g. empty list (expect = 0)
///   next = *(intptr_t*)(head + offset)
///   *v = next                                  // commit
///   *out = head                                // after the section (committed only)
template <std::uint32_t Field>
PERCPU_ALWAYS_INLINE status pop(std::intptr_t off, std::intptr_t idx, std::intptr_t* v,
                                std::intptr_t expect, std::ptrdiff_t offset, std::intptr_t* out,
                                int index) noexcept {
  // head and next are outputs (asm goto may have them since GCC 11 and Clang 11): the popped
  // item stays in a register for the caller instead of a store and a reload.
  std::intptr_t head, next;
#define PERCPU_X86_POP(link, offset_constraint) \
  asm volatile goto(PERCPU_X86_SECTION_HEAD(PERCPU_X86_CMPFAIL_EXIT)                   \
           "movq (%[v]), %[head]\n\t"                                                  \
           "cmpq %[expect], %[head]\n\t"                                               \
           "je %l[cmpfail]\n\t"                                                        \
           PERCPU_X86_INJECT(2)                                                        \
           "movq " link("head") ", %[next]\n\t"                                        \
           PERCPU_X86_INJECT(3)                                                        \
           "movq %[next], (%[v])\n\t"                                                  \
           PERCPU_X86_SECTION_TAIL                                                     \
           : [head] "=&r"(head), [next] "=&r"(next)                                    \
           : PERCPU_X86_HEAD_OPERANDS(off, index), [v] "r"(v), [expect] "er"(expect),  \
             [offset] offset_constraint(offset)                                        \
           : "rax", "memory", "cc"                                                     \
           : aborted, moved, cmpfail)
  PERCPU_X86_WITH_LINK(PERCPU_X86_POP)
#undef PERCPU_X86_POP
  *out = head;
  PERCPU_RETURN_STATUSES_WITH_CMPFAIL
}

/// compare, then free-list pop: if (*v2 == expect2 && *v != expect) { *out = *v; *v = next }.
/// The pop of a list that a remote drainer can close: v2 is the list's gate, and a closed gate
/// makes the pop fail inside the section (see freelist.h).
///
///   if (area->index != index || index >= bound) return index_changed
///   if (*v2 != expect2) return compare_failed
///   head = *v
///   if (head == expect) return compare_failed
///   next = *(intptr_t*)(head + offset)
///   *v = next                                  // commit
///   *out = head                                // after the section (committed only)
template <std::uint32_t Field>
PERCPU_ALWAYS_INLINE status compare_pop(std::intptr_t off, std::intptr_t idx, std::intptr_t* v,
                                        std::intptr_t expect, std::intptr_t* v2,
                                        std::intptr_t expect2, std::ptrdiff_t offset,
                                        std::intptr_t* out, int index) noexcept {
  // head and next are outputs (asm goto may have them since GCC 11 and Clang 11): the popped
  // item stays in a register for the caller instead of a store and a reload.
  std::intptr_t head, next;
#define PERCPU_X86_COMPARE_POP(link, offset_constraint) \
  asm volatile goto(PERCPU_X86_SECTION_HEAD(PERCPU_X86_CMPFAIL_EXIT)                   \
           "cmpq %[expect2], %[gate]\n\t"                                              \
           "jnz %l[cmpfail]\n\t"                                                       \
           "movq (%[v]), %[head]\n\t"                                                  \
           "cmpq %[expect], %[head]\n\t"                                               \
           "je %l[cmpfail]\n\t"                                                        \
           PERCPU_X86_INJECT(2)                                                        \
           "movq " link("head") ", %[next]\n\t"                                        \
           PERCPU_X86_INJECT(3)                                                        \
           "movq %[next], (%[v])\n\t"                                                  \
           PERCPU_X86_SECTION_TAIL                                                     \
           : [head] "=&r"(head), [next] "=&r"(next)                                    \
           : PERCPU_X86_HEAD_OPERANDS(off, index), [v] "r"(v), [expect] "er"(expect),  \
             [gate] "m"(*v2), [expect2] "er"(expect2), [offset] offset_constraint(offset)  \
           : "rax", "memory", "cc"                                                     \
           : aborted, moved, cmpfail)
  PERCPU_X86_WITH_LINK(PERCPU_X86_COMPARE_POP)
#undef PERCPU_X86_COMPARE_POP
  *out = head;
  PERCPU_RETURN_STATUSES_WITH_CMPFAIL
}

/// compare, then free-list push: if (*v2 == expect2) { *(item + offset) = *v; *v = item }.
/// The push of a list that a remote drainer can close (v2: the gate). The head is read inside
/// the section, so no compare of it is needed: nothing can change it before the commit without
/// aborting the section. The link store may happen in attempts that then abort; the item is the
/// caller's until the commit publishes it.
///
///   if (area->index != index || index >= bound) return index_changed
///   if (*v2 != expect2) return compare_failed
///   head = *v
///   *(intptr_t*)(item + offset) = head         // try-store (the item is not yet published)
///   *v = item                                  // commit
template <std::uint32_t Field>
PERCPU_ALWAYS_INLINE status compare_push(std::intptr_t off, std::intptr_t idx, std::intptr_t* v,
                                         std::intptr_t* v2, std::intptr_t expect2,
                                         std::ptrdiff_t offset, std::intptr_t item,
                                         int index) noexcept {
  std::intptr_t head;
#define PERCPU_X86_COMPARE_PUSH(link, offset_constraint) \
  asm volatile goto(PERCPU_X86_SECTION_HEAD(PERCPU_X86_CMPFAIL_EXIT)                   \
           "cmpq %[expect2], %[gate]\n\t"                                              \
           "jnz %l[cmpfail]\n\t"                                                       \
           "movq (%[v]), %[head]\n\t"                                                  \
           PERCPU_X86_INJECT(2)                                                        \
           "movq %[head], " link("item") "\n\t"                                        \
           PERCPU_X86_INJECT(3)                                                        \
           "movq %[item], (%[v])\n\t"                                                  \
           PERCPU_X86_SECTION_TAIL                                                     \
           : [head] "=&r"(head)                                                        \
           : PERCPU_X86_HEAD_OPERANDS(off, index), [v] "r"(v), [gate] "m"(*v2),        \
             [expect2] "er"(expect2), [offset] offset_constraint(offset), [item] "r"(item) \
           : "rax", "memory", "cc"                                                     \
           : aborted, moved, cmpfail)
  PERCPU_X86_WITH_LINK(PERCPU_X86_COMPARE_PUSH)
#undef PERCPU_X86_COMPARE_PUSH
  PERCPU_RETURN_STATUSES_WITH_CMPFAIL
}

/// array-stack push: if (*count < limit) { base[*count] = value; *count += 1 }.
/// The count is read inside the section, so no compare of an expected count is needed: nothing
/// can change it before the commit without aborting the section. The entry store may happen in
/// attempts that then abort; nobody reads above the count until the commit publishes it.
///
///   if (area->index != index || index >= bound) return index_changed
///   n = *count
///   if ((uintptr_t)n >= limit) return compare_failed   // full, or closed (a huge count)
///   base[n] = value                                    // try-store (not yet published)
///   *count = n + 1                                     // commit
template <std::uint32_t Field>
PERCPU_ALWAYS_INLINE status array_push(std::intptr_t off, std::intptr_t idx, std::intptr_t* count,
                                       std::uintptr_t limit, std::intptr_t* base,
                                       std::intptr_t value, int index) noexcept {
  std::intptr_t n;
  asm volatile goto(PERCPU_X86_SECTION_HEAD(PERCPU_X86_CMPFAIL_EXIT)
           "movq (%[count]), %[n]\n\t"
           "cmpq %[limit], %[n]\n\t"
           "jae %l[cmpfail]\n\t"
           PERCPU_X86_INJECT(2)
           "movq %[value], (%[base], %[n], 8)\n\t"
           "addq $1, %[n]\n\t"
           PERCPU_X86_INJECT(3)
           "movq %[n], (%[count])\n\t"
           PERCPU_X86_SECTION_TAIL
           : [n] "=&r"(n)
           : PERCPU_X86_HEAD_OPERANDS(off, index), [count] "r"(count), [limit] "r"(limit),
             [base] "r"(base), [value] "r"(value)
           : "rax", "memory", "cc"
           : aborted, moved, cmpfail);
  PERCPU_RETURN_STATUSES_WITH_CMPFAIL
}

/// array-stack pop: if (*count - 1 < limit) { *count -= 1; *out = base[*count] } (unsigned
/// compare: an empty count, 0, wraps above every limit). Count and entry are read inside the
/// section, so neither needs a compare with an expected value.
///
///   if (area->index != index || index >= bound) return index_changed
///   n = *count - 1
///   if ((uintptr_t)n >= limit) return compare_failed   // empty, or closed (a huge count)
///   top = base[n]
///   *count = n                                         // commit
///   *out = top                                         // after the section (committed only)
template <std::uint32_t Field>
PERCPU_ALWAYS_INLINE status array_pop(std::intptr_t off, std::intptr_t idx, std::intptr_t* count,
                                      std::uintptr_t limit, std::intptr_t* base, std::intptr_t* out,
                                      int index) noexcept {
  std::intptr_t n, top;
  asm volatile goto(PERCPU_X86_SECTION_HEAD(PERCPU_X86_CMPFAIL_EXIT)
           "movq (%[count]), %[n]\n\t"
           "subq $1, %[n]\n\t"
           "cmpq %[limit], %[n]\n\t"
           "jae %l[cmpfail]\n\t"
           PERCPU_X86_INJECT(2)
           "movq (%[base], %[n], 8), %[top]\n\t"
           PERCPU_X86_INJECT(3)
           "movq %[n], (%[count])\n\t"
           PERCPU_X86_SECTION_TAIL
           : [n] "=&r"(n), [top] "=&r"(top)
           : PERCPU_X86_HEAD_OPERANDS(off, index), [count] "r"(count), [limit] "r"(limit),
             [base] "r"(base)
           : "rax", "memory", "cc"
           : aborted, moved, cmpfail);
  *out = top;
  PERCPU_RETURN_STATUSES_WITH_CMPFAIL
}

/// compare, try-store, store: if (*v == expect) { *v2 = newv2; *v = newv }.
/// The store to v2 may happen in attempts that then abort; only the store to v commits.
///
///   if (area->index != index || index >= bound) return index_changed
///   if (*v != expect) return compare_failed
///   *v2 = newv2                                // try-store (not yet published)
///   *v = newv                                  // commit
template <std::uint32_t Field>
PERCPU_ALWAYS_INLINE status compare_store_store(std::intptr_t off, std::intptr_t idx,
                                                std::intptr_t* v, std::intptr_t expect,
                                                std::intptr_t* v2, std::intptr_t newv2,
                                                std::intptr_t newv, int index) noexcept {
  asm volatile goto(PERCPU_X86_SECTION_HEAD(PERCPU_X86_CMPFAIL_EXIT)
           "cmpq (%[v]), %[expect]\n\t"
           "jnz %l[cmpfail]\n\t"
           PERCPU_X86_INJECT(2)
           "movq %[newv2], (%[v2])\n\t"
           PERCPU_X86_INJECT(3)
           "movq %[newv], (%[v])\n\t"
           PERCPU_X86_SECTION_TAIL
           :
           : PERCPU_X86_HEAD_OPERANDS(off, index), [v] "r"(v), [expect] "r"(expect),
             [v2] "r"(v2), [newv2] "r"(newv2), [newv] "r"(newv)
           : "rax", "memory", "cc"
           : aborted, moved, cmpfail);
  PERCPU_RETURN_STATUSES_WITH_CMPFAIL
}

/// compare, copy, store: if (*v == expect) { memcpy(dst, src, len); *v = newv }.
/// Copies 8 bytes at a time, then the remaining 0-7 bytes one at a time.
///
///   if (area->index != index || index >= bound) return index_changed
///   if (*v != expect) return compare_failed
///   copy len bytes src -> dst                  // not yet published
///   *v = newv                                  // commit
template <std::uint32_t Field>
PERCPU_ALWAYS_INLINE status compare_memcpy_store(std::intptr_t off, std::intptr_t idx,
                                                 std::intptr_t* v, std::intptr_t expect, void* dst,
                                                 const void* src, std::size_t len,
                                                 std::intptr_t newv, int index) noexcept {
  asm volatile goto(PERCPU_X86_SECTION_HEAD(PERCPU_X86_CMPFAIL_EXIT)
           "cmpq (%[v]), %[expect]\n\t"
           "jnz %l[cmpfail]\n\t"
           PERCPU_X86_INJECT(2)
           "movq %[src], %%rsi\n\t"
           "movq %[dst], %%rdi\n\t"
           PERCPU_X86_COPY_LOOP
           PERCPU_X86_INJECT(3)
           "movq %[newv], (%[v])\n\t"
           PERCPU_X86_SECTION_TAIL
           :
           : PERCPU_X86_HEAD_OPERANDS(off, index), [v] "r"(v), [expect] "r"(expect),
             [dst] "r"(dst), [src] "r"(src), [len] "r"(len), [newv] "r"(newv)
           : "rax", "rcx", "rsi", "rdi", "memory", "cc"
           : aborted, moved, cmpfail);
  PERCPU_RETURN_STATUSES_WITH_CMPFAIL
}

}  // namespace percpu::arch
