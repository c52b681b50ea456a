// What every entry point of the C API (<percpu.h>) shares: the handles (one C++ structure in
// either index mode behind a type tag) and the rule that no exception crosses into C.
#pragma once

#include <percpu.h>

#include <cxxabi.h>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <new>
#include <stdexcept>
#include <system_error>
#include <utility>
#include <variant>

#include "percpu/cpu.h"
#include "percpu/remote.h"

namespace percpu::c_api {

/// Alternative I of a variant known to hold it (no check left in the code; GCC warned of the
/// null path of a plain get_if).
template <std::size_t I, class V>
PERCPU_ALWAYS_INLINE auto& alternative(V& v) noexcept {
  auto* p = std::get_if<I>(&v);
  if (p == nullptr) __builtin_unreachable();
  return *p;
}

/// A C handle: a type tag (cleared by destroy, so a stale or foreign handle is refused with
/// -EINVAL as long as its memory was not reused) and the C++ structure in the mode it was
/// created in. Cpu and Cid: the structure's two instantiations.
template <std::uint32_t Tag, class Cpu, class Cid>
struct handle {
  static constexpr std::uint32_t kTag = Tag;
  std::uint32_t tag = Tag;
  std::variant<Cpu, Cid> object;

  template <class... Args>
  explicit handle(percpu_index_mode mode, Args&&... args)
      : object(make(mode, std::forward<Args>(args)...)) {}

  /// Calls f with the structure, in its mode's type.
  template <class F>
  PERCPU_ALWAYS_INLINE decltype(auto) with(F&& f) {
    if (object.index() == 0) return f(alternative<0>(object));
    return f(alternative<1>(object));
  }
  template <class F>
  PERCPU_ALWAYS_INLINE decltype(auto) with(F&& f) const {
    if (object.index() == 0) return f(alternative<0>(object));
    return f(alternative<1>(object));
  }

 private:
  template <class... Args>
  static std::variant<Cpu, Cid> make(percpu_index_mode mode, Args&&... args) {
    if (mode == PERCPU_CPU_ID)
      return std::variant<Cpu, Cid>(std::in_place_index<0>, std::forward<Args>(args)...);
    return std::variant<Cpu, Cid>(std::in_place_index<1>, std::forward<Args>(args)...);
  }
};

/// The tag at `h`, read as bytes: every handle starts with its tag. A handle of another type
/// (whose alignment may be less than this one's: percpu_ref and percpu_rwsem want 64 bytes) is
/// then refused without being accessed as a handle of this type.
PERCPU_ALWAYS_INLINE std::uint32_t tag_at(const void* h) noexcept {
  std::uint32_t tag;
  std::memcpy(&tag, h, sizeof tag);
  return tag;
}

/// True when `h` is a live handle of type H (a C handle type that derives from one).
template <class H, class P>
PERCPU_ALWAYS_INLINE bool valid(P* h) noexcept {
  return h != nullptr && tag_at(h) == H::kTag;
}

/// A mode the C API knows.
inline bool known_mode(percpu_index_mode mode) noexcept {
  return mode == PERCPU_CPU_ID || mode == PERCPU_MM_CID;
}

/// The negative errno value for an error code: system and generic codes as they are, percpu's
/// remote_errc::no_fence as -EOPNOTSUPP.
inline int to_errno(const std::error_code& e) noexcept {
  if (e.category() == std::generic_category() || e.category() == std::system_category())
    return -e.value();
  if (e.category() == remote_category()) return -EOPNOTSUPP;
  return -EIO;
}

/// Runs f() and returns its value, or the negative errno of what it threw: no exception
/// crosses into C. Thread cancellation's unwinding (abi::__forced_unwind) passes through, as
/// it must.
template <class F>
int guarded(F&& f) {
  try {
    return f();
  } catch (::abi::__forced_unwind&) {
    throw;
  } catch (const std::bad_alloc&) {
    return -ENOMEM;
  } catch (const std::system_error& e) {
    return to_errno(e.code());
  } catch (const std::out_of_range&) {
    return -ERANGE;
  } catch (const std::exception&) {  // invalid_argument, logic_error, length_error: misuse
    return -EINVAL;
  } catch (...) {
    return -EIO;
  }
}

/// A constructor's body: the new handle, or nullptr with errno set from what it threw.
template <class H, class F>
H* created(F&& f) {
  H* out = nullptr;
  const int rc = guarded([&] {
    out = f();
    return 0;
  });
  if (rc != 0) errno = -rc;
  return out;
}

/// A constructor taking an index mode (and, `valid`, its other arguments' checks): EINVAL for
/// an unknown mode or invalid arguments, else created(f).
template <class H, class F>
H* created_in(percpu_index_mode mode, bool valid, F&& f) {
  if (!known_mode(mode) || !valid) {
    errno = EINVAL;
    return nullptr;
  }
  return created<H>(std::forward<F>(f));
}

/// A destroy: clears the tag, then deletes; NULL or a bad handle is left alone.
template <class H, class P>
void destroyed(P* h) noexcept {
  if (!valid<H>(h)) return;
  H* real = static_cast<H*>(h);
  real->tag = 0;
  delete real;
}

}  // namespace percpu::c_api
