// Assembler building blocks for x86-64 rseq critical sections (ABI: Linux
// include/uapi/linux/rseq.h; design.md "What the kernel gives").
//
// Every section has:
//  - a 32-byte aligned `rseq_cs` descriptor {version 0, flags 0, start_ip, post_commit_offset,
//    abort_ip} in section __rseq_cs, listed in __rseq_cs_ptr_array so debuggers and tools can
//    find every critical section;
//  - an arming store of the descriptor's address into the area's rseq_cs field (%fs:8(off));
//  - the body from start_ip, ending with the single commit store;
//  - an abort handler in section __rseq_failure, preceded by the signature, encoded as the
//    operand of `ud1 0x53053053(%rip), %edi` so that stray execution traps;
//  - each early exit (a jump out of the body that is neither commit nor abort) listed as a
//    (start_ip, exit_ip) pair in __rseq_exit_point_array.
// Every pushed section carries the "?" flag: it joins the section group (COMDAT) of the function
// the asm is in, so when the linker drops a duplicate inline function it drops its descriptors,
// exit points and abort handlers with it (otherwise they would point into discarded code).
// Labels are GNU as numeric local labels passed as strings, so a macro can be expanded in many
// inlined copies without clashes. Macros only, C and C++: the C header's inline counter add
// (internal/c_counter.h) builds its section from them too; C code gets no delay injection.
#pragma once

#if !defined(PERCPU_PUBLIC_HEADER) && !defined(PERCPU_BUILDING)
#error "<percpu/internal/arch/x86_64/sections.h> is internal: include <percpu/percpu.h>"
#endif

#include "percpu/internal/rseq_tables.h"

#define PERCPU_X86_STR_(x) #x
#define PERCPU_X86_STR(x) PERCPU_X86_STR_(x)

/// Arms the section: area->rseq_cs = &desc. Clobbers %rax.
#define PERCPU_X86_ARM_SECTION(desc, off) \
  "leaq " desc                            \
  "b(%%rip), %%rax\n\t"                   \
  "movq %%rax, %%fs:8(" off ")\n\t"

/// Opens the abort handler `abort` in __rseq_failure, after the signature. The caller writes the
/// handler's body and closes it with ".popsection".
#define PERCPU_X86_ABORT_HANDLER(abort)      \
  ".pushsection __rseq_failure, \"ax?\"\n\t" \
  ".byte 0x0f, 0xb9, 0x3d\n\t"               \
  ".long " PERCPU_X86_STR(0x53053053) "\n\t" abort ":\n\t"

/// Delay injection point `n` (1-3) for stress testing (the kernel selftests' RSEQ_INJECT_ASM):
/// in builds with PERCPU_INJECT_DELAYS, spins detail::g_inject_loops[n] iterations at this point
/// of the section, so that preemption, migration and signals land inside sections far more often.
/// Clobbers %eax (every section already clobbers %rax for the arming store). Empty otherwise.
#if defined(PERCPU_INJECT_DELAYS) && defined(__cplusplus)
#define PERCPU_X86_INJECT(n) \
  "movl " #n                 \
  "*4(%[inject]), %%eax\n\t" \
  "testl %%eax, %%eax\n\t"   \
  "jz 8" #n                  \
  "f\n\t"                    \
  "9" #n                     \
  ":\n\t"                    \
  "decl %%eax\n\t"           \
  "jnz 9" #n                 \
  "b\n\t"                    \
  "8" #n ":\n\t"
#define PERCPU_X86_INJECT_OPERAND , [inject] "r"(::percpu::detail::g_inject_loops)
#else
#define PERCPU_X86_INJECT(n) ""
#define PERCPU_X86_INJECT_OPERAND
#endif

/// Copies %[len] bytes from %rsi to %rdi: 8 bytes at a time, then the 0-7 byte tail one at a
/// time. Clobbers %rax, %rcx, %rsi, %rdi (labels 5-8: use it where no other label has them).
#define PERCPU_X86_COPY_LOOP \
  "movq %[len], %%rcx\n\t"   \
  "shrq $3, %%rcx\n\t"       \
  "jz 6f\n\t"                \
  "5:\n\t"                   \
  "movq (%%rsi), %%rax\n\t"  \
  "movq %%rax, (%%rdi)\n\t"  \
  "addq $8, %%rsi\n\t"       \
  "addq $8, %%rdi\n\t"       \
  "decq %%rcx\n\t"           \
  "jnz 5b\n\t"               \
  "6:\n\t"                   \
  "movq %[len], %%rcx\n\t"   \
  "andq $7, %%rcx\n\t"       \
  "jz 8f\n\t"                \
  "7:\n\t"                   \
  "movb (%%rsi), %%al\n\t"   \
  "movb %%al, (%%rdi)\n\t"   \
  "incq %%rsi\n\t"           \
  "incq %%rdi\n\t"           \
  "decq %%rcx\n\t"           \
  "jnz 7b\n\t"               \
  "8:\n\t"

// Commit label and abort handler (jumps to `aborted`).
#define PERCPU_X86_SECTION_TAIL \
  "2:\n\t" PERCPU_X86_ABORT_HANDLER("4") "jmp %l[aborted]\n\t"                \
  ".popsection\n\t"

// The head of a current-index section (current_ops.h has its pseudocode): arm, read the index,
// compare it with the section bound, compute the slot. `exits` lists further early exits, `keep`
// runs after the checks with the index still in %[slot] (the lock keeps a copy in %[at]).
#define PERCPU_X86_CURRENT_HEAD(exits, keep) \
  PERCPU_RSEQ_DESCRIPTOR("3", "1", "2", "4") \
  PERCPU_RSEQ_EXIT_POINT("1", "%l[slow]")    \
  exits                                               \
  PERCPU_X86_ARM_SECTION("3", "%[off]")               \
  "1:\n\t"                                            \
  "movl %%fs:%c[field](%[off]), %k[slot]\n\t"         \
  "cmpl %[bound], %k[slot]\n\t"                       \
  "jae %l[slow]\n\t" PERCPU_X86_INJECT(1) keep        \
  ".if %c[shift]\n\t"                                 \
  "shlq %[shift], %[slot]\n\t"                       \
  ".else\n\t"                                         \
  "imulq %[stride], %[slot]\n\t"                      \
  ".endif\n\t"                                        \
  "addq %[base], %[slot]\n\t"
