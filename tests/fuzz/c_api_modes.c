/* The C API's constructors called from C with any int as the index mode: C passes any value of
 * an enum's type (its compatible integer type), C++ may not form one outside the enumerators'
 * range, so c_api_fuzz.cpp reaches the out-of-range modes through these. */
#include <percpu.h>

#include "c_api_modes.h"

percpu_counter* fuzz_counter_create(int mode) {
  return percpu_counter_create((percpu_index_mode)mode);
}

percpu_batched_counter* fuzz_batched_counter_create(int mode, int64_t batch) {
  return percpu_batched_counter_create((percpu_index_mode)mode, batch);
}

percpu_freelist* fuzz_freelist_create(int mode, unsigned flags) {
  return percpu_freelist_create((percpu_index_mode)mode, flags);
}

percpu_pool* fuzz_pool_create(int mode, size_t stride, int slots) {
  return percpu_pool_create((percpu_index_mode)mode, stride, slots);
}

percpu_rwsem* fuzz_rwsem_create(int mode) {
  return percpu_rwsem_create((percpu_index_mode)mode);
}

percpu_ref* fuzz_ref_create(int mode, percpu_ref_release_fn release, void* arg) {
  return percpu_ref_create((percpu_index_mode)mode, release, arg);
}

percpu_histogram* fuzz_histogram_create(int mode, uint64_t max_value, int precision_bits) {
  return percpu_histogram_create((percpu_index_mode)mode, max_value, precision_bits);
}
