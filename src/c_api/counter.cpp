// The C API's counter (<percpu.h>: percpu_counter_*): percpu::counter<int64_t, M>.
#include <percpu.h>

#include <cerrno>
#include <cstdint>

#include "c_api/c_handle.h"
#include "percpu/counter.h"

using percpu::index_mode;

struct percpu_counter
    : percpu::c_api::handle<0x70637431, percpu::counter<std::int64_t, index_mode::cpu_id>,
                            percpu::counter<std::int64_t, index_mode::mm_cid>> {
  using handle::handle;
};

namespace c = percpu::c_api;

extern "C" {

PERCPU_C_API percpu_counter* percpu_counter_create(percpu_index_mode mode) {
  if (!c::known_mode(mode)) {
    errno = EINVAL;
    return nullptr;
  }
  return c::created<percpu_counter>([&] { return new percpu_counter(mode); });
}

PERCPU_C_API void percpu_counter_destroy(percpu_counter* h) {
  c::destroyed<percpu_counter>(h);
}

PERCPU_C_API int percpu_counter_add(percpu_counter* h, int64_t n) {
  if (!c::valid<percpu_counter>(h)) [[unlikely]]
    return -EINVAL;
  h->with([n](auto& counter) { counter.add(n); });
  return 0;
}

PERCPU_C_API int percpu_counter_load(const percpu_counter* h, int64_t* value) {
  if (!c::valid<percpu_counter>(h) || value == nullptr) return -EINVAL;
  *value = h->with([](const auto& counter) { return counter.load(); });
  return 0;
}

PERCPU_C_API int percpu_counter_reset(percpu_counter* h, int64_t* taken) {
  if (!c::valid<percpu_counter>(h) || taken == nullptr) return -EINVAL;
  *taken = h->with([](auto& counter) { return counter.reset(); });
  return 0;
}

}  // extern "C"
