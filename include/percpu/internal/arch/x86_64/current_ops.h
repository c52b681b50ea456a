// x86-64 current-index sections: the per-CPU operations of the structures' fast paths, each a
// critical section that reads the calling thread's index itself, after arming, and computes its
// slot from it (slot = base + index * stride). A section that reads its index inside needs no
// compare of an index read before it: the kernel aborts the section if the thread is preempted
// or migrated (the only ways cpu_id or mm_cid can change under it) before the commit. So the
// common case is: arm, read the index, check it against the section bound, do the work, commit.
//
// Head of every section, as pseudocode (Field: the area's cpu_id, offset 4, or mm_cid, 24):
//
//   area->rseq_cs = &descriptor
//   index = area->Field                          // inside the section from here
//   if ((uint32_t)index >= bound) return slow   // beyond the index space, an unregistered area
//                                                // (cpu_id -1; percpu's own area keeps mm_cid
//                                                // at kMmCidUnregistered while unregistered), or
//                                                // not in rseq mode (bound 0)
//   slot = base + index * stride
//
// In mm_cid mode the caller has checked before (current_ops.h, with_area) that the area is not
// glibc's area of a thread glibc did not register, whose mm_cid stays 0 unguarded: a check
// whose answer is constant for the thread, so it is hoisted out of the caller's loop.
//
// The bound is detail::current_bound<Field>(): the index space's size in rseq mode, 0 before
// initialization, in fallback mode and from the start of a switch to it (which zeroes it before
// its fence), and, for mm_cid, 0 on kernels without mm_cid (before 6.3), where the slow paths
// serve mm_cid mode through cpu_id. The rules of ops.h hold: no store to the area but the
// arming one, stores before the commit only to memory nobody reads before the commit, no
// disarming exit, `asm volatile goto`; x86-64 is TSO, so every commit is a release store.
//
// Slot layouts: a word (counter, lock); a list {head, gate} (gate 0: open); a stack {count,
// entries bottom first} (a count with kCountClosed set is closed by a remote drain).
#pragma once

#if !defined(PERCPU_PUBLIC_HEADER) && !defined(PERCPU_BUILDING)
#error "<percpu/internal/arch/x86_64/current_ops.h> is internal: include <percpu/percpu.h>"
#endif

#include <cstddef>
#include <cstdint>

#include "percpu/abi.h"
#include "percpu/internal/arch/x86_64/ops.h"
#include "percpu/internal/arch/x86_64/sections.h"
#include "percpu/internal/current_result.h"
#include "percpu/runtime.h"

namespace percpu::arch {

/// mm_cid mode's sections do not check that the area is registered: their caller does, hoisted
/// out of its loop (current_ops.h, with_area; aarch64/current_ops.h says why it differs there).
inline constexpr bool kSectionsCheckRegistration = false;

// The head above: PERCPU_X86_CURRENT_HEAD (sections.h, which the C header's inline add shares).

#define PERCPU_X86_CURRENT_OPERANDS(off, t)                                                  \
  [off] "r"(off), [field] "i"(Field), [bound] "m"(::percpu::detail::current_bound<Field>()), \
      [shift] "i"(Shift), [stride] "rme"(Shift != 0 ? std::uintptr_t{0} : (t).stride),       \
      [base] "rme"((t).base)PERCPU_X86_INJECT_OPERAND

#define PERCPU_X86_MISS_EXIT PERCPU_RSEQ_EXIT_POINT("1", "%l[miss]")

/// Counts of entries stay below this (every stack's capacity is at most 2^24 entries): a pop
/// compares count - 1 with it, which an empty count (wrapping) and a closed one both fail.
inline constexpr std::int32_t kCurrentPopLimit = 0x7FFFFFFF;

/// add: *slot += count.
///
///   head (above)
///   *slot += count                             // commit (one read-modify-write instruction)
template <std::uint32_t Field, unsigned Shift = 0>
PERCPU_ALWAYS_INLINE current_result current_add(std::intptr_t off, slot_table t,
                                                std::intptr_t count) noexcept {
  std::uintptr_t slot;
  asm volatile goto(PERCPU_X86_CURRENT_HEAD("", "")
                        PERCPU_X86_INJECT(3) "addq %[count], (%[slot])\n\t" PERCPU_X86_SECTION_TAIL
                    : [slot] "=&r"(slot)
                    : PERCPU_X86_CURRENT_OPERANDS(off, t), [count] "er"(count)
                    : "rax", "memory", "cc"
                    : aborted, slow);
  PERCPU_CURRENT_RESULTS
}

/// gated add: *slot += count while the shared word *gate is 0; miss when it is not. A writer
/// (percpu_rwsem) or a mode switch (percpu_ref) stores a nonzero gate and then fences every CPU:
/// a section that read the gate open either committed before the fence or aborts, so after it
/// no section commits an add that did not see the gate closed.
///
///   head (above)
///   if (*gate != 0) return miss                // closed: the caller's slow path
///   *slot += count                             // commit (one read-modify-write instruction)
template <std::uint32_t Field, unsigned Shift = 0>
PERCPU_ALWAYS_INLINE current_result current_gated_add(std::intptr_t off, slot_table t,
                                                      const std::intptr_t* gate,
                                                      std::intptr_t count) noexcept {
  std::uintptr_t slot;
  asm volatile goto(PERCPU_X86_CURRENT_HEAD(PERCPU_X86_MISS_EXIT, "")
                    "cmpq $0, %[gate]\n\t"
                    "jnz %l[miss]\n\t" PERCPU_X86_INJECT(3)
                    "addq %[count], (%[slot])\n\t" PERCPU_X86_SECTION_TAIL
                    : [slot] "=&r"(slot)
                    : PERCPU_X86_CURRENT_OPERANDS(off, t), [gate] "m"(*gate), [count] "er"(count)
                    : "rax", "memory", "cc"
                    : aborted, slow, miss);
  PERCPU_CURRENT_RESULTS_WITH_MISS
}

/// bounded add: *slot += count while the shared word *gate is 0 and the new value stays within
/// [low, low + span]; miss otherwise (percpu_counter's batch: its slow path folds the slot into
/// the shared count). The gate pairs with a fence as in current_gated_add.
///
///   head (above)
///   if (*gate != 0) return miss                // closed: the caller's slow path
///   v = *slot + count
///   if ((uintptr_t)(v - low) > span) return miss   // the slot would leave its range
///   *slot = v                                  // commit
template <std::uint32_t Field, unsigned Shift = 0>
PERCPU_ALWAYS_INLINE current_result current_bounded_add(std::intptr_t off, slot_table t,
                                                        const std::intptr_t* gate,
                                                        std::intptr_t count, std::intptr_t low,
                                                        std::uintptr_t span) noexcept {
  std::uintptr_t slot, v;
  asm volatile goto(PERCPU_X86_CURRENT_HEAD(PERCPU_X86_MISS_EXIT, "")
                    "cmpq $0, %[gate]\n\t"
                    "jnz %l[miss]\n\t"
                    "movq (%[slot]), %[v]\n\t"
                    "addq %[count], %[v]\n\t"
                    "movq %[v], %%rax\n\t"
                    "subq %[low], %%rax\n\t"
                    "cmpq %[span], %%rax\n\t"
                    "ja %l[miss]\n\t" PERCPU_X86_INJECT(3)
                    "movq %[v], (%[slot])\n\t" PERCPU_X86_SECTION_TAIL
                    : [slot] "=&r"(slot), [v] "=&r"(v)
                    : PERCPU_X86_CURRENT_OPERANDS(off, t), [gate] "m"(*gate), [count] "er"(count),
                      [low] "r"(low), [span] "r"(span)
                    : "rax", "memory", "cc"
                    : aborted, slow, miss);
  PERCPU_CURRENT_RESULTS_WITH_MISS
}

/// gated take: v = *slot, *slot = 0 while the shared word *gate is 0; miss when it is not
/// (percpu_counter's fold: the slot's value goes to the shared count).
///
///   head (above)
///   if (*gate != 0) return miss
///   v = *slot
///   *slot = 0                                  // commit
template <std::uint32_t Field, unsigned Shift = 0>
PERCPU_ALWAYS_INLINE current_result current_gated_take(std::intptr_t off, slot_table t,
                                                       const std::intptr_t* gate,
                                                       std::intptr_t& taken) noexcept {
  std::uintptr_t slot, v;
  asm volatile goto(PERCPU_X86_CURRENT_HEAD(PERCPU_X86_MISS_EXIT, "")
                    "cmpq $0, %[gate]\n\t"
                    "jnz %l[miss]\n\t"
                    "movq (%[slot]), %[v]\n\t" PERCPU_X86_INJECT(3)
                    "movq $0, (%[slot])\n\t" PERCPU_X86_SECTION_TAIL
                    : [slot] "=&r"(slot), [v] "=&r"(v)
                    : PERCPU_X86_CURRENT_OPERANDS(off, t), [gate] "m"(*gate)
                    : "rax", "memory", "cc"
                    : aborted, slow, miss);
  taken = static_cast<std::intptr_t>(v);
  PERCPU_CURRENT_RESULTS_WITH_MISS
}

/// capped add: the bounded add, also only while the shared word *word is at most `cap`
/// (percpu_counter::limited_add()'s fast path: the shared count far enough below the limit).
///
///   head (above)
///   if (*gate != 0) return miss
///   if (*word > cap) return miss               // signed
///   v = *slot + count
///   if ((uintptr_t)(v - low) > span) return miss
///   *slot = v                                  // commit
template <std::uint32_t Field, unsigned Shift = 0>
PERCPU_ALWAYS_INLINE current_result current_capped_add(std::intptr_t off, slot_table t,
                                                       const std::intptr_t* gate,
                                                       const std::intptr_t* word, std::intptr_t cap,
                                                       std::intptr_t count, std::intptr_t low,
                                                       std::uintptr_t span) noexcept {
  std::uintptr_t slot, v;
  asm volatile goto(PERCPU_X86_CURRENT_HEAD(PERCPU_X86_MISS_EXIT, "")
                    "cmpq $0, %[gate]\n\t"
                    "jnz %l[miss]\n\t"
                    "cmpq %[cap], %[word]\n\t"
                    "jg %l[miss]\n\t"
                    "movq (%[slot]), %[v]\n\t"
                    "addq %[count], %[v]\n\t"
                    "movq %[v], %%rax\n\t"
                    "subq %[low], %%rax\n\t"
                    "cmpq %[span], %%rax\n\t"
                    "ja %l[miss]\n\t" PERCPU_X86_INJECT(3)
                    "movq %[v], (%[slot])\n\t" PERCPU_X86_SECTION_TAIL
                    : [slot] "=&r"(slot), [v] "=&r"(v)
                    : PERCPU_X86_CURRENT_OPERANDS(off, t), [gate] "m"(*gate), [word] "m"(*word),
                      [cap] "r"(cap), [count] "r"(count), [low] "r"(low), [span] "r"(span)
                    : "rax", "memory", "cc"
                    : aborted, slow, miss);
  PERCPU_CURRENT_RESULTS_WITH_MISS
}

/// compare-and-store: if (*slot == expect) *slot = newv; on commit, `word` is the slot and
/// `index` the index (a lock's holder keeps both).
///
///   head (above)
///   if (*slot != expect) return miss           // e.g. the lock is held
///   *slot = newv                               // commit
template <std::uint32_t Field, unsigned Shift = 0>
PERCPU_ALWAYS_INLINE current_result current_compare_store(std::intptr_t off, slot_table t,
                                                          std::intptr_t expect, std::intptr_t newv,
                                                          std::intptr_t*& word,
                                                          int& index) noexcept {
  std::uintptr_t slot;
  std::uint32_t at;
  asm volatile goto(PERCPU_X86_CURRENT_HEAD(PERCPU_X86_MISS_EXIT, "movl %k[slot], %k[at]\n\t")
                    "cmpq %[expect], (%[slot])\n\t"
                    "jnz %l[miss]\n\t" PERCPU_X86_INJECT(3)
                    "movq %[newv], (%[slot])\n\t" PERCPU_X86_SECTION_TAIL
                    : [slot] "=&r"(slot), [at] "=&r"(at)
                    : PERCPU_X86_CURRENT_OPERANDS(off, t), [expect] "er"(expect),
                      [newv] "er"(newv)
                    : "rax", "memory", "cc"
                    : aborted, slow, miss);
  word = reinterpret_cast<std::intptr_t*>(slot);
  index = static_cast<int>(at);
  PERCPU_CURRENT_RESULTS_WITH_MISS
}

/// free-list pop of a list that a remote drainer can close: slot {head, gate}.
///
///   head (above)
///   if (slot->gate != 0) return slow           // closed by a drain: the slow path waits
///   item = slot->head
///   if (item == 0) return miss                 // empty
///   next = *(intptr_t*)(item + link)
///   slot->head = next                          // commit
template <std::uint32_t Field, unsigned Shift = 0>
PERCPU_ALWAYS_INLINE current_result current_compare_pop(std::intptr_t off, slot_table t,
                                                        std::ptrdiff_t offset,
                                                        std::intptr_t& item) noexcept {
  std::uintptr_t slot;
  std::intptr_t head, next;
#define PERCPU_X86_CURRENT_POP(link, offset_constraint) \
  asm volatile goto(PERCPU_X86_CURRENT_HEAD(PERCPU_X86_MISS_EXIT, "")                      \
                    "cmpq $0, 8(%[slot])\n\t"                                              \
                    "jnz %l[slow]\n\t"                                                     \
                    "movq (%[slot]), %[head]\n\t"                                          \
                    "testq %[head], %[head]\n\t"                                           \
                    "jz %l[miss]\n\t" PERCPU_X86_INJECT(2)                                 \
                    "movq " link("head") ", %[next]\n\t" PERCPU_X86_INJECT(3)              \
                    "movq %[next], (%[slot])\n\t" PERCPU_X86_SECTION_TAIL                  \
                    : [slot] "=&r"(slot), [head] "=&r"(head), [next] "=&r"(next)           \
                    : PERCPU_X86_CURRENT_OPERANDS(off, t), [offset] offset_constraint(offset) \
                    : "rax", "memory", "cc"                                                \
                    : aborted, slow, miss)
  PERCPU_X86_WITH_LINK(PERCPU_X86_CURRENT_POP)
#undef PERCPU_X86_CURRENT_POP
  item = head;
  PERCPU_CURRENT_RESULTS_WITH_MISS
}

/// free-list push of a list that a remote drainer can close: slot {head, gate}. The link store
/// may happen in attempts that then abort; the item is the caller's until the commit.
///
///   head (above)
///   if (slot->gate != 0) return slow           // closed by a drain
///   *(intptr_t*)(item + link) = slot->head     // try-store (the item is not yet published)
///   slot->head = item                          // commit
template <std::uint32_t Field, unsigned Shift = 0>
PERCPU_ALWAYS_INLINE current_result current_compare_push(std::intptr_t off, slot_table t,
                                                         std::ptrdiff_t offset,
                                                         std::intptr_t item) noexcept {
  std::uintptr_t slot;
  std::intptr_t head;
#define PERCPU_X86_CURRENT_PUSH(link, offset_constraint) \
  asm volatile goto(PERCPU_X86_CURRENT_HEAD("", "")                                         \
                    "cmpq $0, 8(%[slot])\n\t"                                               \
                    "jnz %l[slow]\n\t"                                                      \
                    "movq (%[slot]), %[head]\n\t" PERCPU_X86_INJECT(2)                      \
                    "movq %[head], " link("item") "\n\t" PERCPU_X86_INJECT(3)               \
                    "movq %[item], (%[slot])\n\t" PERCPU_X86_SECTION_TAIL                   \
                    : [slot] "=&r"(slot), [head] "=&r"(head)                                \
                    : PERCPU_X86_CURRENT_OPERANDS(off, t), [offset] offset_constraint(offset), \
                      [item] "r"(item)                                                      \
                    : "rax", "memory", "cc"                                                 \
                    : aborted, slow)
  PERCPU_X86_WITH_LINK(PERCPU_X86_CURRENT_PUSH)
#undef PERCPU_X86_CURRENT_PUSH
  PERCPU_CURRENT_RESULTS
}

/// array-stack push: slot {count, entries}. The entry store may happen in attempts that then
/// abort; nobody reads above the count until the commit publishes it.
///
///   head (above)
///   n = slot->count
///   if ((uintptr_t)n >= limit)                 // after the section:
///     return n & kCountClosed ? slow : miss    //   closed by a drain, or full
///   slot->entries[n] = value                   // try-store (not yet published)
///   slot->count = n + 1                        // commit
template <std::uint32_t Field>
PERCPU_ALWAYS_INLINE current_result current_array_push(std::intptr_t off, slot_table t,
                                                       std::uintptr_t limit,
                                                       std::intptr_t value) noexcept {
  constexpr unsigned Shift = 0;  // stacks live in region tables: the stride is multiplied
  std::uintptr_t slot;
  std::intptr_t n;
  asm volatile goto(PERCPU_X86_CURRENT_HEAD(PERCPU_RSEQ_EXIT_POINT("1", "5f"), "")
                    "movq (%[slot]), %[n]\n\t"
                    "cmpq %[limit], %[n]\n\t"
                    "jae 5f\n\t" PERCPU_X86_INJECT(2)
                    "movq %[value], 8(%[slot], %[n], 8)\n\t"
                    "addq $1, %[n]\n\t" PERCPU_X86_INJECT(3)
                    "movq %[n], (%[slot])\n\t"
                    "2:\n\t" PERCPU_X86_ABORT_HANDLER("4")
                    "jmp %l[aborted]\n\t"
                    "5:\n\t"
                    "btq $%c[closed_bit], %[n]\n\t"
                    "jc %l[slow]\n\t"
                    "jmp %l[miss]\n\t"
                    ".popsection\n\t"
                    : [slot] "=&r"(slot), [n] "=&r"(n)
                    : PERCPU_X86_CURRENT_OPERANDS(off, t), [limit] "er"(limit),
                      [value] "r"(value), [closed_bit] "i"(kCountClosedBit)
                    : "rax", "memory", "cc"
                    : aborted, slow, miss);
  PERCPU_CURRENT_RESULTS_WITH_MISS
}

/// array-stack pop: slot {count, entries}; `out` is the popped entry on commit.
///
///   head (above)
///   n = slot->count - 1
///   if ((uintptr_t)n >= kCurrentPopLimit)      // after the section:
///     return n == -1 ? miss : slow             //   empty, or closed by a drain
///   top = slot->entries[n]
///   slot->count = n                            // commit
template <std::uint32_t Field>
PERCPU_ALWAYS_INLINE current_result current_array_pop(std::intptr_t off, slot_table t,
                                                      std::intptr_t& out) noexcept {
  constexpr unsigned Shift = 0;  // stacks live in region tables: the stride is multiplied
  std::uintptr_t slot;
  std::intptr_t n, top;
  asm volatile goto(PERCPU_X86_CURRENT_HEAD(PERCPU_RSEQ_EXIT_POINT("1", "5f"), "")
                    "movq (%[slot]), %[n]\n\t"
                    "subq $1, %[n]\n\t"
                    "cmpq %[limit], %[n]\n\t"
                    "jae 5f\n\t" PERCPU_X86_INJECT(2)
                    "movq 8(%[slot], %[n], 8), %[top]\n\t" PERCPU_X86_INJECT(3)
                    "movq %[n], (%[slot])\n\t"
                    "2:\n\t" PERCPU_X86_ABORT_HANDLER("4")
                    "jmp %l[aborted]\n\t"
                    "5:\n\t"
                    "cmpq $-1, %[n]\n\t"
                    "je %l[miss]\n\t"
                    "jmp %l[slow]\n\t"
                    ".popsection\n\t"
                    : [slot] "=&r"(slot), [n] "=&r"(n), [top] "=&r"(top)
                    : PERCPU_X86_CURRENT_OPERANDS(off, t), [limit] "i"(kCurrentPopLimit)
                    : "rax", "memory", "cc"
                    : aborted, slow, miss);
  out = top;
  PERCPU_CURRENT_RESULTS_WITH_MISS
}

/// record-stack push, slot {count, records of RecordStride bytes}: copies `len` bytes from `src`
/// into the record above the count, then commits the raised count. The copy may happen in
/// attempts that then abort; nobody reads above the count until the commit publishes it.
///
///   head (above)
///   n = slot->count
///   if ((uintptr_t)n >= limit)                 // after the section:
///     return n & kCountClosed ? slow : miss    //   closed by a drain, or full
///   copy len bytes src -> slot->records + n * RecordStride   // not yet published
///   slot->count = n + 1                        // commit
template <std::uint32_t Field, std::size_t RecordStride>
PERCPU_ALWAYS_INLINE current_result current_memcpy_push(std::intptr_t off, slot_table t,
                                                        std::uintptr_t limit, const void* src,
                                                        std::size_t len) noexcept {
  constexpr unsigned Shift = 0;  // stacks live in region tables: the stride is multiplied
  std::uintptr_t slot;
  asm volatile goto(PERCPU_X86_CURRENT_HEAD(PERCPU_RSEQ_EXIT_POINT("1", "10f"), "")
                    "movq (%[slot]), %%rdx\n\t"
                    "cmpq %[limit], %%rdx\n\t"
                    "jae 10f\n\t" PERCPU_X86_INJECT(2)
                    "imulq $%c[rs], %%rdx, %%rdi\n\t"
                    "leaq 8(%[slot], %%rdi), %%rdi\n\t"
                    "movq %[src], %%rsi\n\t" PERCPU_X86_COPY_LOOP
                    "addq $1, %%rdx\n\t" PERCPU_X86_INJECT(3)
                    "movq %%rdx, (%[slot])\n\t"
                    "2:\n\t" PERCPU_X86_ABORT_HANDLER("4")
                    "jmp %l[aborted]\n\t"
                    "10:\n\t"
                    "btq $%c[closed_bit], %%rdx\n\t"
                    "jc %l[slow]\n\t"
                    "jmp %l[miss]\n\t"
                    ".popsection\n\t"
                    : [slot] "=&r"(slot)
                    : PERCPU_X86_CURRENT_OPERANDS(off, t), [limit] "er"(limit), [src] "r"(src),
                      [len] "ri"(len), [rs] "i"(RecordStride), [closed_bit] "i"(kCountClosedBit)
                    : "rax", "rcx", "rdx", "rsi", "rdi", "memory", "cc"
                    : aborted, slow, miss);
  PERCPU_CURRENT_RESULTS_WITH_MISS
}

/// record-stack pop, slot {count, records of RecordStride bytes}: copies the top record's `len`
/// bytes into `dst`, then commits the lowered count. The copy into `dst` may happen in attempts
/// that then abort.
///
///   head (above)
///   n = slot->count - 1
///   if ((uintptr_t)n >= kCurrentPopLimit)      // after the section:
///     return n == -1 ? miss : slow             //   empty, or closed by a drain
///   copy len bytes slot->records + n * RecordStride -> dst
///   slot->count = n                            // commit
template <std::uint32_t Field, std::size_t RecordStride>
PERCPU_ALWAYS_INLINE current_result current_memcpy_pop(std::intptr_t off, slot_table t, void* dst,
                                                       std::size_t len) noexcept {
  constexpr unsigned Shift = 0;  // stacks live in region tables: the stride is multiplied
  std::uintptr_t slot;
  asm volatile goto(PERCPU_X86_CURRENT_HEAD(PERCPU_RSEQ_EXIT_POINT("1", "10f"), "")
                    "movq (%[slot]), %%rdx\n\t"
                    "subq $1, %%rdx\n\t"
                    "cmpq %[limit], %%rdx\n\t"
                    "jae 10f\n\t" PERCPU_X86_INJECT(2)
                    "imulq $%c[rs], %%rdx, %%rsi\n\t"
                    "leaq 8(%[slot], %%rsi), %%rsi\n\t"
                    "movq %[dst], %%rdi\n\t" PERCPU_X86_COPY_LOOP PERCPU_X86_INJECT(3)
                    "movq %%rdx, (%[slot])\n\t"
                    "2:\n\t" PERCPU_X86_ABORT_HANDLER("4")
                    "jmp %l[aborted]\n\t"
                    "10:\n\t"
                    "cmpq $-1, %%rdx\n\t"
                    "je %l[miss]\n\t"
                    "jmp %l[slow]\n\t"
                    ".popsection\n\t"
                    : [slot] "=&r"(slot)
                    : PERCPU_X86_CURRENT_OPERANDS(off, t), [limit] "i"(kCurrentPopLimit),
                      [dst] "r"(dst), [len] "ri"(len), [rs] "i"(RecordStride)
                    : "rax", "rcx", "rdx", "rsi", "rdi", "memory", "cc"
                    : aborted, slow, miss);
  PERCPU_CURRENT_RESULTS_WITH_MISS
}

#undef PERCPU_X86_CURRENT_HEAD
#undef PERCPU_X86_CURRENT_OPERANDS
#undef PERCPU_X86_MISS_EXIT

}  // namespace percpu::arch
