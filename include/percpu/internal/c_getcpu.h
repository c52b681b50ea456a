/* The C getcpu cache behind <percpu.h>: the hot state's layout as C sees it and the inline fast
 * paths of percpu_current_cpu(), percpu_current_mm_cid() and percpu_current_node(), the same
 * instructions as the C++ ones (percpu/cpu.h) from the same asm text (getcpu_asm.h). C only:
 * <percpu.h> compiled as C++ calls the C++ functions instead. */
#ifndef PERCPU_INTERNAL_C_GETCPU_H
#define PERCPU_INTERNAL_C_GETCPU_H

#if !defined(PERCPU_PUBLIC_HEADER) && !defined(PERCPU_BUILDING)
#error "<percpu/internal/c_getcpu.h> is internal: include <percpu.h>"
#endif

#include <stdint.h>

#include "percpu/internal/getcpu_asm.h"

/* runtime.h's percpu::detail::hot_state, field for field (src/c_api/getcpu.cpp checks the
 * offsets at compile time). Written by initialization and by the one-way switch to fallback
 * mode only. */
struct percpu_internal_hot_state {
  intptr_t rseq_offset;
  intptr_t mm_cid_index_offset;
  intptr_t registration_offset;
  uint32_t fallback;
  uint32_t node_usable;
  uint32_t mm_cid_usable;
  uint32_t cpu_section_bound;
  uint32_t mm_section_bound;
  uint32_t mm_cid_field_bound;
  uint64_t cpu_word;
  uint64_t mm_cid_word;
};

#ifndef __cplusplus
/* The one symbol of the hot state (C++ names it percpu::detail::g_hot). */
extern const struct percpu_internal_hot_state percpu_hot_state;

/* The slow paths: initialize, register the thread, or ask the kernel (runtime.h). */
int percpu_internal_current_cpu_slow(void);
int percpu_internal_current_mm_cid_slow(void);
int percpu_internal_current_node_slow(void);

#define PERCPU_INTERNAL_INLINE static inline __attribute__((always_inline))

#if defined(__x86_64__)
#define PERCPU_INTERNAL_LOAD_AREA_I32(to, at, from) \
  __asm__ __volatile__(PERCPU_ASM_LOAD_AREA_I32     \
                       : [value] "=r"(to)           \
                       : [field] "i"(at), [off] "r"(from))
#define PERCPU_INTERNAL_LOAD_WORD(bound, offset, word)                                           \
  do {                                                                                           \
    __asm__(PERCPU_ASM_GETCPU_BOUND : "=r"(bound) : [w] PERCPU_HOT_ADDR(&(word)));               \
    __asm__(PERCPU_ASM_GETCPU_OFFSET : "=r"(offset) : [w] PERCPU_HOT_ADDR(&(word)), "r"(bound)); \
  } while (0)
#elif defined(__aarch64__)
#define PERCPU_INTERNAL_LOAD_AREA_I32(to, at, from) \
  ((to) = *(const volatile int32_t*)((char*)__builtin_thread_pointer() + (from) + (at)))
#define PERCPU_INTERNAL_LOAD_WORD(bound, offset, word)                   \
  do {                                                                   \
    uint64_t percpu_w_;                                                  \
    __asm__(PERCPU_ASM_LOAD_INVARIANT : "=r"(percpu_w_) : "r"(&(word))); \
    (offset) = (int32_t)percpu_w_;                                       \
    (bound) = (uint32_t)(percpu_w_ >> 32);                               \
  } while (0)
#endif

/* runtime.h's if_area_registered(): `value` if the thread's area may serve mm_cid mode, else
 * 0; one asm statement without memory operands, hoisted with the word it guards. */
PERCPU_INTERNAL_INLINE uint64_t percpu_internal_if_area_registered(uint64_t value) {
  uint64_t out;
#if defined(__x86_64__)
  __asm__(PERCPU_ASM_IF_AREA_REGISTERED
          : [out] "=&r"(out)
          : [v] "r"(value), [at] PERCPU_HOT_ADDR(&percpu_hot_state.registration_offset)
          : "cc");
#else
  __asm__(PERCPU_ASM_IF_AREA_REGISTERED
          : [out] "=&r"(out)
          : [v] "r"(value), [at] "r"(&percpu_hot_state.registration_offset),
            [tp] "r"(__builtin_thread_pointer())
          : "cc");
#endif
  return out;
}

PERCPU_INTERNAL_INLINE int percpu_internal_current_cpu(void) {
  uint32_t bound;
  intptr_t offset;
  int32_t cpu;
  PERCPU_INTERNAL_LOAD_WORD(bound, offset, percpu_hot_state.cpu_word);
  PERCPU_INTERNAL_LOAD_AREA_I32(cpu, 4, offset);
  if (__builtin_expect((uint32_t)cpu < bound, 1)) return cpu;
  return percpu_internal_current_cpu_slow();
}

PERCPU_INTERNAL_INLINE int percpu_internal_current_mm_cid(void) {
  uint32_t bound;
  intptr_t offset;
  int32_t cid;
  PERCPU_INTERNAL_LOAD_WORD(bound, offset, percpu_hot_state.mm_cid_word);
  PERCPU_INTERNAL_LOAD_AREA_I32(cid, 0, offset);
  if (__builtin_expect((uint32_t)cid < (uint32_t)percpu_internal_if_area_registered(bound), 1))
    return cid;
  return percpu_internal_current_mm_cid_slow();
}

PERCPU_INTERNAL_INLINE int percpu_internal_current_node(void) {
  const intptr_t off = percpu_hot_state.rseq_offset;
  if (__builtin_expect(off != 0 && percpu_hot_state.node_usable != 0, 1)) {
    int32_t cpu, node;
    PERCPU_INTERNAL_LOAD_AREA_I32(cpu, 4, off);
    if (__builtin_expect(cpu >= 0, 1)) {
      PERCPU_INTERNAL_LOAD_AREA_I32(node, 20, off);
      return node;
    }
  }
  return percpu_internal_current_node_slow();
}
#endif /* !__cplusplus */

#endif /* PERCPU_INTERNAL_C_GETCPU_H */
