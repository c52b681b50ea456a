// The C API's reference count (<percpu.h>: percpu_ref_*): percpu::percpu_ref<M>, the kernel's
// percpu_ref.
#include <percpu.h>

#include <cerrno>
#include <functional>
#include <system_error>

#include "c_api/c_handle.h"
#include "percpu/percpu_ref.h"

using percpu::index_mode;

struct percpu_ref : percpu::c_api::handle<0x70637266, percpu::percpu_ref<index_mode::cpu_id>,
                                          percpu::percpu_ref<index_mode::mm_cid>> {
  // The C callback gets the handle and its argument. It may destroy the handle: percpu_ref
  // touches nothing of itself after calling it (percpu_ref.cpp, after_put).
  percpu_ref(percpu_index_mode mode, percpu_ref_release_fn fn, void* arg)
      : handle(mode, std::function<void()>([this, fn, arg] {
                 if (fn != nullptr) fn(this, arg);
               })) {}
};

namespace c = percpu::c_api;

extern "C" {

PERCPU_C_API percpu_ref* percpu_ref_create(percpu_index_mode mode, percpu_ref_release_fn release,
                                           void* arg) {
  return c::created_in<percpu_ref>(mode, true, [&] { return new percpu_ref(mode, release, arg); });
}

PERCPU_C_API void percpu_ref_destroy(percpu_ref* h) {
  c::destroyed<percpu_ref>(h);
}

PERCPU_C_API int percpu_ref_get(percpu_ref* h) {
  if (!c::valid<percpu_ref>(h)) [[unlikely]]
    return -EINVAL;
  h->with([](auto& r) { r.get(); });
  return 0;
}

PERCPU_C_API int percpu_ref_tryget(percpu_ref* h) {
  if (!c::valid<percpu_ref>(h)) [[unlikely]]
    return -EINVAL;
  return h->with([](auto& r) { return r.tryget(); }) ? 1 : 0;
}

PERCPU_C_API int percpu_ref_tryget_live(percpu_ref* h) {
  if (!c::valid<percpu_ref>(h)) [[unlikely]]
    return -EINVAL;
  return h->with([](auto& r) { return r.tryget_live(); }) ? 1 : 0;
}

PERCPU_C_API int percpu_ref_put(percpu_ref* h) {
  if (!c::valid<percpu_ref>(h)) [[unlikely]]
    return -EINVAL;
  h->with([](auto& r) { r.put(); });
  return 0;
}

PERCPU_C_API int percpu_ref_kill(percpu_ref* h) {
  if (!c::valid<percpu_ref>(h)) return -EINVAL;
  return c::guarded([h] {
    h->with([](auto& r) { r.kill(); });
    return 0;
  });
}

PERCPU_C_API int percpu_ref_resurrect(percpu_ref* h) {
  if (!c::valid<percpu_ref>(h)) return -EINVAL;
  return c::guarded([h] {
    h->with([](auto& r) { r.resurrect(); });
    return 0;
  });
}

PERCPU_C_API int percpu_ref_is_zero(const percpu_ref* h) {
  if (!c::valid<percpu_ref>(h)) return -EINVAL;
  return h->with([](const auto& r) { return r.is_zero(); }) ? 1 : 0;
}

PERCPU_C_API int percpu_ref_is_dying(const percpu_ref* h) {
  if (!c::valid<percpu_ref>(h)) return -EINVAL;
  return h->with([](const auto& r) { return r.is_dying(); }) ? 1 : 0;
}

}  // extern "C"
