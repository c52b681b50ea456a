/* The C header's inline counter add (x86-64): the head of a percpu_counter handle as C sees it,
 * the add's critical section built from the same asm macros as the C++ one
 * (arch/x86_64/sections.h, the current-index add of arch/x86_64/current_ops.h), and the unload
 * teardown every C object with such sections gets (as unload_teardown.h gives C++ objects).
 * C only: <percpu.h> compiled as C++, and on aarch64, calls the exported percpu_counter_add(). */
#ifndef PERCPU_INTERNAL_C_COUNTER_H
#define PERCPU_INTERNAL_C_COUNTER_H

#if !defined(PERCPU_PUBLIC_HEADER) && !defined(PERCPU_BUILDING)
#error "<percpu/internal/c_counter.h> is internal: include <percpu.h>"
#endif

#include <stdint.h>

/* What the inline add reads of a percpu_counter handle (src/c_api/counter.cpp lays the handle
 * out with this head first and checks it at compile time). */
struct percpu_internal_counter_head {
  uint32_t tag;   /* PERCPU_INTERNAL_COUNTER_TAG while the handle lives; 0 once destroyed */
  uint32_t mode;  /* percpu_index_mode: 0 cpu_id, 1 mm_cid */
  uintptr_t base; /* index i's slot: the int64_t at base + (i << PERCPU_INTERNAL_COUNTER_SHIFT) */
};
#define PERCPU_INTERNAL_COUNTER_TAG 0x70637431u
#define PERCPU_INTERNAL_COUNTER_SHIFT 6 /* one cache line per index */

#if !defined(__cplusplus) && defined(__x86_64__)
#define PERCPU_INTERNAL_C_INLINE_ADD 1

#include "percpu/internal/arch/x86_64/sections.h"
#include "percpu/internal/c_getcpu.h"

/* The add's slow path: every case the section does not serve (a bad handle, before
 * initialization, fallback mode, an aborted section, an index beyond the section bound). The
 * same as the exported percpu_counter_add(). */
int percpu_internal_counter_add_slow(void* c, int64_t n);

/* Clears the rseq_cs of every thread that points into [lo, hi) (unload_teardown.h's
 * disarm_range()). Weak: a program that includes <percpu.h> for its types only and finds the
 * functions with dlsym() links without libpercpu (its teardown then has nothing to disarm). */
void percpu_internal_disarm_range(uintptr_t lo, uintptr_t hi) __attribute__((weak));

/* rseq_tables.h's descriptors land in this object's __rseq_cs; the linker names its bounds. */
extern const char __start___rseq_cs[] __attribute__((weak, visibility("hidden")));
extern const char __stop___rseq_cs[] __attribute__((weak, visibility("hidden")));

#if !defined(PERCPU_NO_UNLOAD_TEARDOWN)
/* The object's unload teardown (unload_teardown.h says why): weak and hidden, so each object
 * keeps one copy and one flag, whatever number of its translation units include this. */
extern int percpu_internal_c_teardown_done; /* declared first: -Wmissing-variable-declarations */
void percpu_internal_c_teardown(void);      /* and -Wmissing-prototypes */
__attribute__((weak, visibility("hidden"))) int percpu_internal_c_teardown_done;
__attribute__((weak, visibility("hidden"), destructor)) void percpu_internal_c_teardown(void) {
  const uintptr_t lo = (uintptr_t)__start___rseq_cs, hi = (uintptr_t)__stop___rseq_cs;
  if (percpu_internal_c_teardown_done) return;
  percpu_internal_c_teardown_done = 1;
  if (lo != 0 && lo < hi && percpu_internal_disarm_range != 0) percpu_internal_disarm_range(lo, hi);
}
#endif

/* *slot += n on the calling thread's slot: the current-index add of arch/x86_64/current_ops.h
 * (PERCPU_X86_CURRENT_HEAD: arm, read the index inside the section, compare it with the section
 * bound, compute the slot; then one read-modify-write commit) on the area field at `at_field`,
 * cpu_id (4) or mm_cid (24), with that mode's bound word. Jumps to the caller's labels
 * `aborted` and `slow`. */
#define PERCPU_INTERNAL_C_ADD(at_field, bound_word, area, slots, delta)                        \
  do {                                                                                         \
    uintptr_t percpu_slot_;                                                                    \
    __asm__ __volatile__ goto(                                                                 \
        PERCPU_X86_CURRENT_HEAD("", "") "addq %[count], (%[slot])\n\t" PERCPU_X86_SECTION_TAIL \
        : [slot] "=&r"(percpu_slot_)                                                           \
        : [off] "r"(area), [field] "i"(at_field), [bound] "m"(bound_word),                     \
          [shift] "i"(PERCPU_INTERNAL_COUNTER_SHIFT), [stride] "i"(0), [base] "rm"(slots),     \
          [count] "er"(delta)                                                                  \
        : "rax", "memory", "cc"                                                                \
        : aborted, slow);                                                                      \
  } while (0)

/* percpu_counter_add() inlined: the handle's tag and mode, the area's offset and, in mm_cid
 * mode, its registration check (both hoisted out of a caller's loop, as the C++ add's), one
 * section per mode; the exported slow path otherwise. (Measured against other shapes, 1 thread,
 * inlined in a loop: the field and bound named in the handle with one section for both modes
 * ran 1.5x the C++ add; a branch-free pick of them, 1.7x; the registration check taken before
 * the mode's branch, 1.25-1.35x; this shape, 1.05-1.15x, both modes alike.) */
PERCPU_INTERNAL_INLINE int percpu_internal_counter_add(void* c, int64_t n) {
  const struct percpu_internal_counter_head* h = (const struct percpu_internal_counter_head*)c;
  if (__builtin_expect(h != 0 && h->tag == PERCPU_INTERNAL_COUNTER_TAG, 1)) {
    intptr_t off;
    __asm__(PERCPU_ASM_LOAD_INVARIANT
            : "=r"(off)
            : [w] PERCPU_HOT_ADDR(&percpu_hot_state.rseq_offset));
    if (h->mode == 0) {
      if (__builtin_expect(off != 0, 1)) {
        PERCPU_INTERNAL_C_ADD(4, percpu_hot_state.cpu_section_bound, off, h->base, n);
        return 0;
      }
    } else {
      off = (intptr_t)percpu_internal_if_area_registered((uint64_t)off);
      if (__builtin_expect(off != 0, 1)) {
        PERCPU_INTERNAL_C_ADD(24, percpu_hot_state.mm_cid_field_bound, off, h->base, n);
        return 0;
      }
    }
  }
aborted:
slow:
  return percpu_internal_counter_add_slow(c, n);
}
#endif /* !__cplusplus && __x86_64__ */

#endif /* PERCPU_INTERNAL_C_COUNTER_H */
