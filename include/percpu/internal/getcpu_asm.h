/* The getcpu cache's loads as asm text, one spelling shared by the C++ fast paths (runtime.h,
 * arch/x86_64/area.h) and the C ones (c_getcpu.h, behind <percpu.h>), so that a C caller's
 * inlined read is the C++ one instruction for instruction. Macros only: C and C++ include it.
 *
 * The statements have no memory operands: the words they read are written once, from 0 to
 * their final value (runtime.h, hot_state), so the compiler may hoist them out of a caller's
 * loop, across calls; a load hoisted above initialization reads 0, which sends the caller to its
 * slow path. */
#ifndef PERCPU_INTERNAL_GETCPU_ASM_H
#define PERCPU_INTERNAL_GETCPU_ASM_H

#if !defined(PERCPU_PUBLIC_HEADER) && !defined(PERCPU_BUILDING)
#error "<percpu/internal/getcpu_asm.h> is internal: include <percpu/percpu.h> or <percpu.h>"
#endif

/* How the x86-64 statements address a word of the hot state whose address is their operand
 * `name`, `disp` bytes into it. In an executable built by GCC, the state's address is a
 * link-time constant (a copy relocation in a position-independent one), so the load is
 * RIP-relative, as a plain load of it would be. In a shared object the state may lie in another
 * one, so its address comes from the GOT (a load the compiler hoists too); clang takes no such
 * address as an "i" operand and gets the same register form. C gets the register form too: gcc
 * -flto with its default PIE (no -fPIE given) compiles the link-time code as PIC and refuses
 * the "i" operand ("impossible constraint"), which a C user's LTO build would hit; the
 * address's `lea` is hoisted with the loads. */
#if defined(__x86_64__) && defined(__cplusplus) && !defined(__clang__) && \
    (!defined(__PIC__) || defined(__PIE__))
#define PERCPU_HOT_AT(name, disp) "%c[" name "]+" disp "(%%rip)"
#define PERCPU_HOT_ADDR(address) "i"(address)
#else
#define PERCPU_HOT_AT(name, disp) disp "(%[" name "])"
#define PERCPU_HOT_ADDR(address) "r"(address)
#endif

#if defined(__x86_64__)
/* A getcpu word's bound (its high half) into %0; operand [w]: the word's address. */
#define PERCPU_ASM_GETCPU_BOUND "movl " PERCPU_HOT_AT("w", "4") ", %0"
/* The word's offset (its low half, sign-extended) into %0; takes the bound as an input so that
 * it comes second (x86-64 keeps loads in order: a nonzero bound comes with its offset). */
#define PERCPU_ASM_GETCPU_OFFSET "movslq " PERCPU_HOT_AT("w", "0") ", %0"
/* One 8-byte word of the hot state into %0. */
#define PERCPU_ASM_LOAD_INVARIANT "movq " PERCPU_HOT_AT("w", "0") ", %0"
/* [out] = [v] if the 32-bit field at the thread pointer plus the word at [at]
 * (registration_offset) is not negative, else 0 (runtime.h, if_area_registered()). */
#define PERCPU_ASM_IF_AREA_REGISTERED \
  "movq " PERCPU_HOT_AT("at", "0") ", %[out]\n\t" \
  "cmpl $0, %%fs:(%[out])\n\t"                   \
  "movl $0, %k[out]\n\t"                         \
  "cmovgeq %[v], %[out]"
/* [value] = the 32-bit field at byte [field] of the area [off] bytes from the thread pointer. */
#define PERCPU_ASM_LOAD_AREA_I32 "movl %%fs:%c[field](%[off]), %[value]"
#elif defined(__aarch64__)
#define PERCPU_ASM_LOAD_INVARIANT "ldr %0, [%1]"
/* As on x86-64; [tp]: the thread pointer. */
#define PERCPU_ASM_IF_AREA_REGISTERED \
  "eor %[out], %[v], %[v]\n\t"        \
  "ldr %[out], [%[at], %[out]]\n\t"   \
  "ldr %w[out], [%[tp], %[out]]\n\t"  \
  "cmp %w[out], #0\n\t"               \
  "csel %[out], %[v], xzr, ge"
#else
#error "percpu: x86-64 or aarch64"
#endif

#endif /* PERCPU_INTERNAL_GETCPU_ASM_H */
