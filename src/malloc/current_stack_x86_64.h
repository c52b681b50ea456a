// x86-64 critical sections on the stack of whichever index the thread runs on: the index is read
// inside the section, so one section does what the generic stack operations (buffer.h) do with
// an index read, a count read and a compared commit. They serve percpu malloc's per-CPU caches,
// whose every allocation and free is one of them (tcmalloc's per-CPU slab works the same way).
//
// Layout: index i's stack starts at `first + i * RegionBytes` with a count word (its bit 62 is
// kCountClosed while a remote drain owns it) followed by the entries, bottom first.
//
// Like the sections of ops.h these do not disarm rseq_cs when they finish: a later preemption
// outside the section's range only makes the kernel clear it. That is safe as long as the code
// holding the descriptors is never unmapped, which is why libpercpu_malloc.so is linked with
// `-z nodelete` (an allocator cannot be unloaded anyway: its objects would outlive it).
#pragma once

#include <cstddef>
#include <cstdint>

#include "percpu/internal/arch/x86_64/sections.h"
#include "percpu/internal/current_result.h"
#include "percpu/runtime.h"

namespace percpu::arch {

// Head of both sections: descriptor, the registration check (cpu_id is negative while this
// thread's own area is not registered, and in glibc's area of a thread glibc did not register,
// whose mm_cid reads 0 and whose sections the kernel would not abort; the generic operations
// handle both; only the thread itself registers, so it is checked before arming), arming store,
// the index check against mm_cid mode's section bound (g_hot.mm_section_bound: the number of
// regions in rseq mode, 0 in fallback mode and from the start of a switch to it, which fences
// sections that began before; an index at or beyond it goes to the slow path, whose index read
// handles it: sysfs may show fewer CPUs than the kernel reports), r = first + index *
// RegionBytes into %rcx and its count into %rdx. (%rax is the arming store's and the delay
// injection's scratch register.)
#define PERCPU_X86_CURRENT_STACK_HEAD        \
  PERCPU_RSEQ_DESCRIPTOR("3", "1", "2", "4") \
  PERCPU_RSEQ_EXIT_POINT("1", "%l[slow]")    \
  "cmpl $0, %%fs:4(%[off])\n\t"             \
  "jl %l[slow]\n\t"                         \
  PERCPU_X86_ARM_SECTION("3", "%[off]")      \
  "1:\n\t" PERCPU_X86_INJECT(1)              \
  "movl %%fs:(%[index_off]), %%ecx\n\t"     \
  "cmpl %[bound], %%ecx\n\t"                \
  "jae %l[slow]\n\t"                        \
  "imulq %[rb], %%rcx, %%rcx\n\t"           \
  "addq %[first], %%rcx\n\t"                \
  "movq (%%rcx), %%rdx\n\t"

#define PERCPU_X86_CURRENT_STACK_TAIL \
  "2:\n\t" PERCPU_X86_ABORT_HANDLER("4") "jmp %l[aborted]\n\t"                \
  ".popsection\n\t"

/// Pops the top entry of the calling thread's index's stack into `out`.
///
///   if (area->cpu_id < 0) return slow                 // before arming
///   if (area->field >= bound) return slow             // beyond the regions, or not rseq mode
///   r = first + area->field * RegionBytes
///   n = r[0]
///   if (n == 0 || n > kMaxStackCount) return slow    // empty, or closed by a remote drain
///   out = r[n]
///   r[0] = n - 1                                      // commit
///
/// `off` is the area's offset from the thread pointer (nonzero: rseq registered), `index_off`
/// the offset of the index field (cpu_id or mm_cid) from the thread pointer: off + its offset in
/// the area (mm_cid mode's precomputed field, g_hot.mm_cid_index_offset); there is one region per
/// index of mm_cid mode's index space after `first`'s index 0.
template <std::size_t RegionBytes>
inline current_result current_stack_pop(std::intptr_t off, std::intptr_t index_off,
                                        std::intptr_t* first, std::intptr_t& out) noexcept {
  std::intptr_t v;
  asm volatile goto(
      PERCPU_X86_CURRENT_STACK_HEAD
      "leaq -1(%%rdx), %%r8\n\t"
      "cmpq %[max], %%r8\n\t"
      "jae %l[slow]\n\t"
      PERCPU_X86_INJECT(3)
      "movq (%%rcx,%%rdx,8), %[v]\n\t"
      "movq %%r8, (%%rcx)\n\t" PERCPU_X86_CURRENT_STACK_TAIL
      // The entry comes out in %rax, free once the arming store is done (the delay injection,
      // which uses it too, runs before the load): no callee-saved register, so no stack frame.
      : [v] "=&a"(v)
      : [off] "r"(off), [first] "r"(first), [rb] "i"(RegionBytes), [index_off] "r"(index_off),
        [bound] "m"(::percpu::detail::g_hot.mm_section_bound),
        [max] "i"(kMaxStackCount)PERCPU_X86_INJECT_OPERAND
      : "rcx", "rdx", "r8", "memory", "cc"
      : slow, aborted);
  out = v;
  return current_result::committed;
slow:
  return current_result::slow;
aborted:
  return current_result::aborted;
}

/// Pushes `value` onto the calling thread's index's stack, whose current capacity (at most
/// kMaxStackCount) is the word `cap_offset` bytes from the stack's count (a capacity that another
/// thread may change at any time: it bounds growth, the stack's room is the caller's).
///
///   if (area->cpu_id < 0) return slow                 // before arming
///   if (area->field >= bound) return slow             // beyond the regions, or not rseq mode
///   r = first + area->field * RegionBytes
///   n = r[0]
///   if (n >= *(r + cap_offset)) return slow           // full, or closed by a remote drain
///   r[n + 1] = value                                  // above the count: nobody reads it yet
///   r[0] = n + 1                                      // commit
template <std::size_t RegionBytes>
inline current_result current_stack_push(std::intptr_t off, std::intptr_t index_off,
                                         std::intptr_t* first, std::intptr_t cap_offset,
                                         std::intptr_t value) noexcept {
  asm volatile goto(PERCPU_X86_CURRENT_STACK_HEAD
           "cmpq (%%rcx,%[cap_offset],1), %%rdx\n\t"
           "jae %l[slow]\n\t"
           "movq %[value], 8(%%rcx,%%rdx,8)\n\t" PERCPU_X86_INJECT(3)
           "incq %%rdx\n\t"
           "movq %%rdx, (%%rcx)\n\t" PERCPU_X86_CURRENT_STACK_TAIL
           :
           : [off] "r"(off), [first] "r"(first), [rb] "i"(RegionBytes), [index_off] "r"(index_off),
             [bound] "m"(::percpu::detail::g_hot.mm_section_bound), [cap_offset] "r"(cap_offset),
             [value] "r"(value)PERCPU_X86_INJECT_OPERAND
           : "rax", "rcx", "rdx", "memory", "cc"
           : slow, aborted);
  return current_result::committed;
slow:
  return current_result::slow;
aborted:
  return current_result::aborted;
}

#undef PERCPU_X86_CURRENT_STACK_HEAD
#undef PERCPU_X86_CURRENT_STACK_TAIL

}  // namespace percpu::arch
