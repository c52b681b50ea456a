/* The C API's contenders of `percpu bench ops` (ops_c.c, compiled as C): each returns the
 * operations one thread did until the byte at `stop` (a std::atomic<bool>) became nonzero. */
#ifndef PERCPU_BENCH_OPS_C_H
#define PERCPU_BENCH_OPS_C_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Creates the counters the add loops use (one per index mode); 0, or -1 when it could not. */
int percpu_bench_c_setup(void);
/** percpu_current_cpu() through a call of a function of its own, and inlined in the loop. */
uint64_t percpu_bench_c_cpu_call(const void* stop);
uint64_t percpu_bench_c_cpu_inline(const void* stop);
/** percpu_current_mm_cid(), likewise. */
uint64_t percpu_bench_c_mm_cid_call(const void* stop);
uint64_t percpu_bench_c_mm_cid_inline(const void* stop);
/** percpu_counter_add(c, 1) through a function of its own, and in the loop itself;
 * `mm_cid`: the counter of that mode, else cpu_id's. */
uint64_t percpu_bench_c_add_call(const void* stop, int mm_cid);
uint64_t percpu_bench_c_add_inline(const void* stop, int mm_cid);

#ifdef __cplusplus
}
#endif

#endif /* PERCPU_BENCH_OPS_C_H */
