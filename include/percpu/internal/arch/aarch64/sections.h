// Assembler building blocks for aarch64 rseq critical sections (ABI: Linux
// include/uapi/linux/rseq.h; the arm64 conventions follow the kernel's rseq selftests,
// tools/testing/selftests/rseq/rseq-arm64.h).
//
// Every section has, as on x86-64 (see ../x86_64/sections.h for the shared rules: the "?" COMDAT
// flag, numeric local labels, the tables):
//  - a 32-byte aligned `rseq_cs` descriptor {version 0, flags 0, start_ip, post_commit_offset,
//    abort_ip} in __rseq_cs, listed in __rseq_cs_ptr_array;
//  - an arming store of the descriptor's address into the area's rseq_cs field;
//  - the body from start_ip, ending with the single commit store;
//  - an abort handler in __rseq_failure, preceded by the signature 0xd428bc00, which is the
//    encoding of `brk #0x45e0`: execution that falls into it traps;
//  - each early exit listed in __rseq_exit_point_array.
// aarch64 has no segment-relative addressing: each section first computes the area's address
// (thread pointer TPIDR_EL0 + offset) into x10; x9 is the scratch register of the arming store,
// the section-bound check and the delay injection. Both are clobbered by every section.
#pragma once

#if !defined(PERCPU_PUBLIC_HEADER) && !defined(PERCPU_BUILDING)
#error "<percpu/internal/arch/aarch64/sections.h> is internal: include <percpu/percpu.h>"
#endif

#include "percpu/internal/rseq_tables.h"

#define PERCPU_A64_STR_(x) #x
#define PERCPU_A64_STR(x) PERCPU_A64_STR_(x)

/// x10 = the calling thread's rseq area (thread pointer + %[off]).
#define PERCPU_A64_AREA    \
  "mrs x10, tpidr_el0\n\t" \
  "add x10, x10, %[off]\n\t"

/// Arms the section: area->rseq_cs = &desc (x10 holds the area). Clobbers x9.
#define PERCPU_A64_ARM_SECTION(desc) \
  "adrp x9, " desc                   \
  "b\n\t"                            \
  "add x9, x9, :lo12:" desc          \
  "b\n\t"                            \
  "str x9, [x10, 8]\n\t"

/// Opens the abort handler `abort` in __rseq_failure, after the signature. The caller writes the
/// handler's body and closes it with ".popsection".
#define PERCPU_A64_ABORT_HANDLER(abort)      \
  ".pushsection __rseq_failure, \"ax?\"\n\t" \
  ".inst " PERCPU_A64_STR(0xd428bc00) "\n\t" abort ":\n\t"

/// Delay injection point `n` (1-3) for stress testing, as on x86-64: in builds with
/// PERCPU_INJECT_DELAYS, spins detail::g_inject_loops[n] iterations here. Clobbers w9.
#ifdef PERCPU_INJECT_DELAYS
#define PERCPU_A64_INJECT(n)  \
  "ldr w9, [%[inject], 4*" #n \
  "]\n\t"                     \
  "cbz w9, 8" #n              \
  "f\n\t"                     \
  "9" #n                      \
  ":\n\t"                     \
  "subs w9, w9, 1\n\t"        \
  "b.ne 9" #n                 \
  "b\n\t"                     \
  "8" #n ":\n\t"
#define PERCPU_A64_INJECT_OPERAND , [inject] "r"(::percpu::detail::g_inject_loops)
#else
#define PERCPU_A64_INJECT(n) ""
#define PERCPU_A64_INJECT_OPERAND
#endif

/// Copies %[len] bytes (a register) from x11 to x12: 8 bytes at a time, then the 0-7 byte tail
/// one at a time. Clobbers x11-x14 (labels 5-8: use it where no other label has them).
#define PERCPU_A64_COPY_LOOP \
  "lsr x13, %[len], 3\n\t"   \
  "cbz x13, 6f\n\t"          \
  "5:\n\t"                   \
  "ldr x14, [x11], 8\n\t"    \
  "str x14, [x12], 8\n\t"    \
  "subs x13, x13, 1\n\t"     \
  "b.ne 5b\n\t"              \
  "6:\n\t"                   \
  "and x13, %[len], 7\n\t"   \
  "cbz x13, 8f\n\t"          \
  "7:\n\t"                   \
  "ldrb w14, [x11], 1\n\t"   \
  "strb w14, [x12], 1\n\t"   \
  "subs x13, x13, 1\n\t"     \
  "b.ne 7b\n\t"              \
  "8:\n\t"
