/* `percpu bench ops`' C API contenders: the loops a C program writes against <percpu.h>,
 * compiled as C (C11), in the suite's two shapes. Through a call: the loop calls a function of
 * its own per operation, 64-byte aligned as the C++ contenders' call_op (bench/ops.h). Inlined:
 * the operation sits in the loop (the getcpu cache, and on x86-64 the counter add, are inline
 * in C). Loops check `stop` every 256 operations, as runner.h's run_until. */
#include "bench/ops_c.h"

#include <percpu.h>

static percpu_counter* g_counters[2];

int percpu_bench_c_setup(void) {
  if (g_counters[0] == 0) g_counters[0] = percpu_counter_create(PERCPU_CPU_ID);
  if (g_counters[1] == 0) g_counters[1] = percpu_counter_create(PERCPU_MM_CID);
  return g_counters[0] != 0 && g_counters[1] != 0 ? 0 : -1;
}

#define KEEP(v) __asm__ __volatile__("" : : "r"(v))

#define LOOP(body)                                                         \
  uint64_t done = 0;                                                       \
  while (!__atomic_load_n((const unsigned char*)stop, __ATOMIC_RELAXED)) { \
    int i;                                                                 \
    for (i = 0; i < 256; ++i) {                                            \
      body;                                                                \
    }                                                                      \
    done += 256;                                                           \
  }                                                                        \
  return done

#define ALIGNED_NOINLINE __attribute__((noinline, aligned(64)))

ALIGNED_NOINLINE static int call_cpu(void) {
  return percpu_current_cpu();
}
ALIGNED_NOINLINE static int call_mm_cid(void) {
  return percpu_current_mm_cid();
}
ALIGNED_NOINLINE static void call_add_cpu(void) {
  percpu_counter_add(g_counters[0], 1);
}
ALIGNED_NOINLINE static void call_add_mm_cid(void) {
  percpu_counter_add(g_counters[1], 1);
}

ALIGNED_NOINLINE uint64_t percpu_bench_c_cpu_call(const void* stop) {
  LOOP(KEEP(call_cpu()));
}
ALIGNED_NOINLINE uint64_t percpu_bench_c_cpu_inline(const void* stop) {
  LOOP(KEEP(percpu_current_cpu()));
}
ALIGNED_NOINLINE uint64_t percpu_bench_c_mm_cid_call(const void* stop) {
  LOOP(KEEP(call_mm_cid()));
}
ALIGNED_NOINLINE uint64_t percpu_bench_c_mm_cid_inline(const void* stop) {
  LOOP(KEEP(percpu_current_mm_cid()));
}
ALIGNED_NOINLINE uint64_t percpu_bench_c_add_call(const void* stop, int mm_cid) {
  if (mm_cid) {
    LOOP(call_add_mm_cid());
  }
  LOOP(call_add_cpu());
}
ALIGNED_NOINLINE uint64_t percpu_bench_c_add_inline(const void* stop, int mm_cid) {
  percpu_counter* c = g_counters[mm_cid ? 1 : 0];
  LOOP(percpu_counter_add(c, 1));
}
