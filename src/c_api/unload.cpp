// The C API's share of unloading: the teardown the C header gives every C object with inline
// sections (internal/c_counter.h) calls disarm_range() through this C name.
#include <cstdint>

#include "percpu/internal/unload_teardown.h"

extern "C" __attribute__((visibility("default"))) void percpu_internal_disarm_range(
    std::uintptr_t lo, std::uintptr_t hi) {
  percpu::detail::disarm_range(lo, hi);
}
