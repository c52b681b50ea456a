// The C API's batched counter (<percpu.h>: percpu_batched_counter_*): percpu::percpu_counter<M>,
// the kernel's percpu_counter.
#include <percpu.h>

#include <cerrno>
#include <cstdint>

#include "c_api/c_handle.h"
#include "percpu/percpu_counter.h"

using percpu::index_mode;

struct percpu_batched_counter
    : percpu::c_api::handle<0x70636274, percpu::percpu_counter<index_mode::cpu_id>,
                            percpu::percpu_counter<index_mode::mm_cid>> {
  using handle::handle;
};

namespace c = percpu::c_api;

extern "C" {

PERCPU_C_API percpu_batched_counter* percpu_batched_counter_create(percpu_index_mode mode,
                                                                   int64_t batch) {
  return c::created_in<percpu_batched_counter>(
      mode, true, [&] { return new percpu_batched_counter(mode, batch); });
}

PERCPU_C_API void percpu_batched_counter_destroy(percpu_batched_counter* h) {
  c::destroyed<percpu_batched_counter>(h);
}

PERCPU_C_API int percpu_batched_counter_add(percpu_batched_counter* h, int64_t n) {
  if (!c::valid<percpu_batched_counter>(h)) [[unlikely]]
    return -EINVAL;
  h->with([n](auto& counter) { counter.add(n); });
  return 0;
}

PERCPU_C_API int percpu_batched_counter_read(const percpu_batched_counter* h, int64_t* value) {
  if (!c::valid<percpu_batched_counter>(h) || value == nullptr) return -EINVAL;
  *value = h->with([](const auto& counter) { return counter.read(); });
  return 0;
}

PERCPU_C_API int percpu_batched_counter_sum(const percpu_batched_counter* h, int64_t* value) {
  if (!c::valid<percpu_batched_counter>(h) || value == nullptr) return -EINVAL;
  *value = h->with([](const auto& counter) { return counter.sum(); });
  return 0;
}

PERCPU_C_API int percpu_batched_counter_compare(const percpu_batched_counter* h, int64_t x,
                                                int* result) {
  if (!c::valid<percpu_batched_counter>(h) || result == nullptr) return -EINVAL;
  *result = h->with([x](const auto& counter) { return counter.compare(x); });
  return 0;
}

PERCPU_C_API int percpu_batched_counter_limited_add(percpu_batched_counter* h, int64_t n,
                                                    int64_t limit) {
  if (!c::valid<percpu_batched_counter>(h)) return -EINVAL;
  const percpu::remote_result<bool> r =
      h->with([n, limit](auto& counter) { return counter.limited_add_or_error(n, limit); });
  if (r.error) return c::to_errno(r.error);
  return r.value ? 1 : 0;
}

PERCPU_C_API int64_t percpu_batched_counter_error_bound(const percpu_batched_counter* h) {
  if (!c::valid<percpu_batched_counter>(h)) return -EINVAL;
  return h->with([](const auto& counter) { return counter.error_bound(); });
}

}  // extern "C"
