// The free tag: how percpu malloc tells an object a user holds from every other small object,
// without looking anything up on the allocation fast path.
//
// Every small object that no user holds carries a tag in its second word: a per-process random
// key mixed with its own address. A span's objects are tagged when the span is made (central.cpp),
// an object keeps its tag in the caches (per-CPU or transfer) and on its span's free list, and
// malloc() clears it, one store to the object the caller is about to use. free() stops the
// process when the tag is present: a double free, or a pointer never handed out. (glibc's
// tcache marks cached objects with a random key in the same way.) A user's data would have to
// equal the 64-bit tag of its own address to be mistaken for a free object.
#pragma once

#include <sys/auxv.h>

#include <cstdint>
#include <cstring>

namespace percpu::malloc_impl {

namespace detail_tag {
/// The process's key; 0 until first needed.
inline std::uint64_t g_key = 0;

/// Reads the key from the kernel's AT_RANDOM bytes (the same in every thread, so concurrent
/// first calls agree); forced odd, so it is never 0.
inline std::uint64_t init_key() noexcept {
  std::uint64_t k = 0x9E3779B97F4A7C15ull;
  if (const auto* random = reinterpret_cast<const unsigned char*>(getauxval(AT_RANDOM)))
    std::memcpy(&k, random + 8, sizeof k);  // glibc uses the first 8 bytes for its canary
  k |= 1;
  __atomic_store_n(&g_key, k, __ATOMIC_RELAXED);
  return k;
}

inline std::uint64_t key() noexcept {
  const std::uint64_t k = __atomic_load_n(&g_key, __ATOMIC_RELAXED);
  return __builtin_expect(k != 0, 1) ? k : init_key();
}

inline std::uint64_t tag_of(const void* p) noexcept {
  return key() ^ reinterpret_cast<std::uintptr_t>(p);
}
}  // namespace detail_tag

/// The word of `p` (an object of at least 16 bytes) that holds the tag, and the tag's value.
inline std::uint64_t& free_tag_word(void* p) noexcept {
  return static_cast<std::uint64_t*>(p)[1];
}
inline std::uint64_t free_tag_of(const void* p) noexcept {
  return detail_tag::tag_of(p);
}

/// The tag of `p`, an object of a span (whose making tagged every object, so the key is set
/// already): no test of the key, and so no call, on free's fast path.
inline std::uint64_t span_object_tag_of(const void* p) noexcept {
  return __atomic_load_n(&detail_tag::g_key, __ATOMIC_RELAXED) ^
         reinterpret_cast<std::uintptr_t>(p);
}

/// Marks `p` (an object of at least 16 bytes) as cached.
inline void set_free_tag(void* p) noexcept {
  static_cast<std::uint64_t*>(p)[1] = detail_tag::tag_of(p);
}

/// Clears the mark as `p` goes to a user.
inline void clear_free_tag(void* p) noexcept {
  static_cast<std::uint64_t*>(p)[1] = 0;
}

/// True when `p` carries the cached mark.
inline bool has_free_tag(const void* p) noexcept {
  return static_cast<const std::uint64_t*>(p)[1] == detail_tag::tag_of(p);
}

}  // namespace percpu::malloc_impl
