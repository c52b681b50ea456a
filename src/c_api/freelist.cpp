// The C API's free list (<percpu.h>: percpu_freelist_*): percpu::freelist of
// percpu_freelist_node, in either index mode, checked (double pushes refused) or not.
#include <percpu.h>

#include <cerrno>
#include <stdexcept>
#include <variant>

#include "c_api/c_handle.h"
#include "percpu/freelist.h"

using percpu::index_mode;
using node = percpu_freelist_node;

namespace {
template <index_mode M, bool Checked>
using list = percpu::freelist<node, &node::next, M, Checked>;
}  // namespace

struct percpu_freelist {
  static constexpr std::uint32_t kTag = 0x7063666c;
  std::uint32_t tag = kTag;
  // Alternatives: (cpu_id, mm_cid) x (unchecked, checked), index mode + 2 * checked.
  std::variant<list<index_mode::cpu_id, false>, list<index_mode::mm_cid, false>,
               list<index_mode::cpu_id, true>, list<index_mode::mm_cid, true>>
      object;

  explicit percpu_freelist(std::size_t which) : object(make(which)) {}

  template <class F>
  PERCPU_ALWAYS_INLINE decltype(auto) with(F&& f) {
    switch (object.index()) {
      case 0:
        return f(percpu::c_api::alternative<0>(object));
      case 1:
        return f(percpu::c_api::alternative<1>(object));
      case 2:
        return f(percpu::c_api::alternative<2>(object));
      default:
        return f(percpu::c_api::alternative<3>(object));
    }
  }

 private:
  static decltype(object) make(std::size_t which) {
    switch (which) {
      case 0:
        return decltype(object)(std::in_place_index<0>);
      case 1:
        return decltype(object)(std::in_place_index<1>);
      case 2:
        return decltype(object)(std::in_place_index<2>);
      default:
        return decltype(object)(std::in_place_index<3>);
    }
  }
};

namespace c = percpu::c_api;

extern "C" {

PERCPU_C_API percpu_freelist* percpu_freelist_create(percpu_index_mode mode, unsigned flags) {
  const bool valid = (flags & ~PERCPU_FREELIST_CHECKED) == 0;
  const std::size_t which =
      static_cast<std::size_t>(mode) + ((flags & PERCPU_FREELIST_CHECKED) != 0 ? 2 : 0);
  return c::created_in<percpu_freelist>(mode, valid, [&] { return new percpu_freelist(which); });
}

PERCPU_C_API void percpu_freelist_destroy(percpu_freelist* h) {
  c::destroyed<percpu_freelist>(h);
}

PERCPU_C_API int percpu_freelist_push(percpu_freelist* h, node* item) {
  if (!c::valid<percpu_freelist>(h) || item == nullptr) [[unlikely]]
    return -EINVAL;
  try {
    h->with([item](auto& l) { l.push(item); });
  } catch (const std::invalid_argument&) {
    return -EINVAL;
  } catch (const std::logic_error&) {  // a checked list: the node is already stored
    return -EEXIST;
  } catch (const std::bad_alloc&) {  // a checked list's record of stored nodes
    return -ENOMEM;
  }
  return 0;
}

PERCPU_C_API node* percpu_freelist_pop(percpu_freelist* h) {
  if (!c::valid<percpu_freelist>(h)) [[unlikely]] {
    errno = EINVAL;
    return nullptr;
  }
  return h->with([](auto& l) { return l.pop(); });
}

PERCPU_C_API node* percpu_freelist_pop_all(percpu_freelist* h) {
  if (!c::valid<percpu_freelist>(h)) {
    errno = EINVAL;
    return nullptr;
  }
  return h->with([](auto& l) { return l.pop_all(); });
}

PERCPU_C_API node* percpu_freelist_drain(percpu_freelist* h, int index) {
  if (!c::valid<percpu_freelist>(h)) {
    errno = EINVAL;
    return nullptr;
  }
  node* out = nullptr;
  const int rc = c::guarded([&] {
    out = h->with([index](auto& l) { return l.drain(index); });
    return 0;
  });
  errno = -rc;
  return out;
}

PERCPU_C_API int percpu_freelist_slots(const percpu_freelist* h) {
  if (!c::valid<percpu_freelist>(h)) return -EINVAL;
  return std::visit([](const auto& l) { return l.slots(); }, h->object);
}

}  // extern "C"
