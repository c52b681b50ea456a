// The C API's reader-writer semaphore (<percpu.h>: percpu_rwsem_*): percpu::percpu_rwsem<M>,
// named as the kernel's percpu-rwsem calls (down_read, up_read, down_write, up_write).
#include <percpu.h>

#include <cerrno>
#include <system_error>

#include "c_api/c_handle.h"
#include "percpu/percpu_rwsem.h"

using percpu::index_mode;

struct percpu_rwsem : percpu::c_api::handle<0x70637277, percpu::percpu_rwsem<index_mode::cpu_id>,
                                            percpu::percpu_rwsem<index_mode::mm_cid>> {
  using handle::handle;
};

namespace c = percpu::c_api;

extern "C" {

PERCPU_C_API percpu_rwsem* percpu_rwsem_create(percpu_index_mode mode) {
  return c::created_in<percpu_rwsem>(mode, true, [&] { return new percpu_rwsem(mode); });
}

PERCPU_C_API void percpu_rwsem_destroy(percpu_rwsem* h) {
  c::destroyed<percpu_rwsem>(h);
}

PERCPU_C_API int percpu_rwsem_down_read(percpu_rwsem* h) {
  if (!c::valid<percpu_rwsem>(h)) [[unlikely]]
    return -EINVAL;
  h->with([](auto& s) { s.lock_shared(); });
  return 0;
}

PERCPU_C_API int percpu_rwsem_down_read_trylock(percpu_rwsem* h) {
  if (!c::valid<percpu_rwsem>(h)) [[unlikely]]
    return -EINVAL;
  return h->with([](auto& s) { return s.try_lock_shared(); }) ? 1 : 0;
}

PERCPU_C_API int percpu_rwsem_up_read(percpu_rwsem* h) {
  if (!c::valid<percpu_rwsem>(h)) [[unlikely]]
    return -EINVAL;
  h->with([](auto& s) { s.unlock_shared(); });
  return 0;
}

PERCPU_C_API int percpu_rwsem_down_write(percpu_rwsem* h) {
  if (!c::valid<percpu_rwsem>(h)) return -EINVAL;
  const std::error_code e = h->with([](auto& s) { return s.lock_or_error(); });
  return e ? c::to_errno(e) : 0;
}

PERCPU_C_API int percpu_rwsem_down_write_trylock(percpu_rwsem* h) {
  if (!c::valid<percpu_rwsem>(h)) return -EINVAL;
  const percpu::remote_result<bool> r = h->with([](auto& s) { return s.try_lock_or_error(); });
  if (r.error) return c::to_errno(r.error);
  return r.value ? 1 : 0;
}

PERCPU_C_API int percpu_rwsem_up_write(percpu_rwsem* h) {
  if (!c::valid<percpu_rwsem>(h)) return -EINVAL;
  h->with([](auto& s) { s.unlock(); });
  return 0;
}

}  // extern "C"
