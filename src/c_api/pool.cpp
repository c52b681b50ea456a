// The C API's pool (<percpu.h>: percpu_pool_*): percpu::pool<M>, objects as raw bytes.
#include <percpu.h>

#include <cerrno>
#include <cstddef>

#include "c_api/c_handle.h"
#include "percpu/pool.h"

using percpu::index_mode;

struct percpu_pool : percpu::c_api::handle<0x7063706c, percpu::pool<index_mode::cpu_id>,
                                           percpu::pool<index_mode::mm_cid>> {
  using handle::handle;
};

namespace c = percpu::c_api;

extern "C" {

PERCPU_C_API percpu_pool* percpu_pool_create(percpu_index_mode mode, size_t stride, int slots) {
  const bool valid = slots >= 0;
  percpu::pool_options options;
  if (stride != 0) options.stride = stride;
  options.slots = slots;
  return c::created_in<percpu_pool>(mode, valid, [&] { return new percpu_pool(mode, options); });
}

PERCPU_C_API void percpu_pool_destroy(percpu_pool* h) {
  c::destroyed<percpu_pool>(h);
}

PERCPU_C_API void* percpu_pool_alloc(percpu_pool* h, size_t size) {
  if (!c::valid<percpu_pool>(h)) {
    errno = EINVAL;
    return nullptr;
  }
  void* out = nullptr;
  const int rc = c::guarded([&] {
    out = h->with([size](auto& p) { return p.allocate_bytes(size); });
    return 0;
  });
  if (rc != 0) errno = -rc;
  return out;
}

PERCPU_C_API int percpu_pool_free(percpu_pool* h, void* base, size_t size) {
  if (!c::valid<percpu_pool>(h)) return -EINVAL;
  if (base == nullptr) return 0;
  return c::guarded([&] {
    h->with([base, size](auto& p) { p.free_bytes(base, size); });
    return 0;
  });
}

PERCPU_C_API size_t percpu_pool_stride(const percpu_pool* h) {
  if (!c::valid<percpu_pool>(h)) return 0;
  return h->with([](const auto& p) { return p.stride(); });
}

PERCPU_C_API int percpu_pool_slots(const percpu_pool* h) {
  if (!c::valid<percpu_pool>(h)) return -EINVAL;
  return h->with([](const auto& p) { return p.slots(); });
}

}  // extern "C"
