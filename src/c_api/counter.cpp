// The C API's counter (<percpu.h>: percpu_counter_*): percpu::counter<int64_t, M>. The handle
// starts with the head the C header's inline add reads (internal/c_counter.h): tag, mode and
// the slots' base.
#include <percpu.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <type_traits>
#include <variant>

#include "c_api/c_handle.h"
#include "percpu/counter.h"
#include "percpu/internal/c_counter.h"

using percpu::index_mode;

namespace {
using counters = std::variant<percpu::counter<std::int64_t, index_mode::cpu_id>,
                              percpu::counter<std::int64_t, index_mode::mm_cid>>;
}  // namespace

struct percpu_counter {
  percpu_internal_counter_head head;
  // Owned: deleted with the handle. A plain pointer, since the handle must be standard-layout
  // and libstdc++'s std::unique_ptr is not one under clang.
  counters* object = nullptr;

  template <class F>
  PERCPU_ALWAYS_INLINE decltype(auto) with(F&& f) {
    if (object->index() == 0) return f(percpu::c_api::alternative<0>(*object));
    return f(percpu::c_api::alternative<1>(*object));
  }
  template <class F>
  PERCPU_ALWAYS_INLINE decltype(auto) with(F&& f) const {
    const counters& o = *object;
    if (o.index() == 0) return f(percpu::c_api::alternative<0>(o));
    return f(percpu::c_api::alternative<1>(o));
  }

  explicit percpu_counter(percpu_index_mode mode) {
    std::unique_ptr<counters> o = mode == PERCPU_CPU_ID
                                      ? std::make_unique<counters>(std::in_place_index<0>)
                                      : std::make_unique<counters>(std::in_place_index<1>);
    const percpu::detail::slot_table t = std::visit([](const auto& c) { return c.table(); }, *o);
    // The inline add computes a slot as base + (index << 6): a counter's own slots are one
    // cache line apart.
    if (t.stride != std::uintptr_t{1} << PERCPU_INTERNAL_COUNTER_SHIFT)
      throw std::logic_error("percpu_counter: slots are not a cache line apart");
    object = o.release();
    head = {PERCPU_INTERNAL_COUNTER_TAG, static_cast<std::uint32_t>(mode), t.base};
  }
  ~percpu_counter() { delete object; }
  percpu_counter(const percpu_counter&) = delete;
  percpu_counter& operator=(const percpu_counter&) = delete;
};
static_assert(std::is_standard_layout_v<percpu_counter> && offsetof(percpu_counter, head) == 0,
              "the C header reads the head at the handle's address");

namespace c = percpu::c_api;

namespace {
bool valid_counter(const percpu_counter* h) noexcept {
  return h != nullptr && percpu::c_api::tag_at(h) == PERCPU_INTERNAL_COUNTER_TAG;
}
}  // namespace

extern "C" {

PERCPU_C_API percpu_counter* percpu_counter_create(percpu_index_mode mode) {
  return c::created_in<percpu_counter>(mode, true, [&] { return new percpu_counter(mode); });
}

PERCPU_C_API void percpu_counter_destroy(percpu_counter* h) {
  if (!valid_counter(h)) return;
  h->head.tag = 0;
  delete h;
}

PERCPU_C_API int percpu_internal_counter_add_slow(void* p, int64_t n) {
  auto* h = static_cast<percpu_counter*>(p);
  if (!valid_counter(h)) [[unlikely]]
    return -EINVAL;
  h->with([n](auto& counter) { counter.add(n); });
  return 0;
}

PERCPU_C_API int percpu_counter_add(percpu_counter* h, int64_t n) {
  return percpu_internal_counter_add_slow(h, n);
}

PERCPU_C_API int percpu_counter_load(const percpu_counter* h, int64_t* value) {
  if (!valid_counter(h) || value == nullptr) return -EINVAL;
  *value = h->with([](const auto& counter) { return counter.load(); });
  return 0;
}

PERCPU_C_API int percpu_counter_reset(percpu_counter* h, int64_t* taken) {
  if (!valid_counter(h) || taken == nullptr) return -EINVAL;
  *taken = h->with([](auto& counter) { return counter.reset(); });
  return 0;
}

}  // extern "C"
