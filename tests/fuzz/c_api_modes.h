/* c_api_modes.c: the C API's constructors with the index mode as an int. */
#ifndef PERCPU_FUZZ_C_API_MODES_H
#define PERCPU_FUZZ_C_API_MODES_H

#include <percpu.h>

#ifdef __cplusplus
extern "C" {
#endif

percpu_counter* fuzz_counter_create(int mode);
percpu_batched_counter* fuzz_batched_counter_create(int mode, int64_t batch);
percpu_freelist* fuzz_freelist_create(int mode, unsigned flags);
percpu_pool* fuzz_pool_create(int mode, size_t stride, int slots);
percpu_rwsem* fuzz_rwsem_create(int mode);
percpu_ref* fuzz_ref_create(int mode, percpu_ref_release_fn release, void* arg);
percpu_histogram* fuzz_histogram_create(int mode, uint64_t max_value, int precision_bits);

#ifdef __cplusplus
}
#endif

#endif
