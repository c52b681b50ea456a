// The free tags: how percpu malloc tells an object a user holds from every other small object,
// and catches a double free or a stray pointer before an object is handed out twice, with no
// load on free's fast path and no lookup on malloc's.
//
// Every small object that no user holds carries one of two tags in its second word, each a
// per-process random key mixed with the object's own address: the *cached* tag while it sits in
// a per-CPU or transfer cache, the *span* tag while it is free in its span (never handed out, or
// returned). Each move checks the tag the object must carry and writes the next:
//   - free() writes the cached tag without reading the word (a store: a miss on a line another
//     CPU wrote waits in the store buffer, where a load would stall the thread);
//   - malloc() checks the cached tag on the object it pops and clears the word (the user's now);
//     the object was pushed by this CPU's frees (its line warm) or came in a refill, which
//     prefetches the batch;
//   - the return of a cached object to its span checks the cached tag and writes the span tag
//     (and the span's bitmap of free objects must not have it free already);
//   - taking an object from its span checks the span tag and writes the cached tag;
//   - a span whose objects are all back is scanned for the span tag on each before its pages go.
// A double free puts one object in the caches twice: the second pop (or return to its span)
// finds the tag already cleared (or the span tag) and stops the process. A free of a pointer
// never handed out, or of an object already back on its span, is found when that copy returns
// to the span, or the span next hands the object out or empties. So a fault is caught before its
// object reaches a second user, but no longer at the free itself: a program that double-frees and
// then exits, never allocating that size again, is not told. (glibc's tcache marks cached objects
// with a random key in the same way and checks it at free.) A user's data would have to equal the
// 64-bit tag of its own address to be mistaken for a free object.
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

/// The word of `p` (an object of at least 16 bytes) that holds the tag.
inline std::uint64_t& free_tag_word(void* p) noexcept {
  return static_cast<std::uint64_t*>(p)[1];
}

/// The cached tag of `p`: the mark of an object in a per-CPU or transfer cache.
inline std::uint64_t cached_tag_of(const void* p) noexcept {
  return detail_tag::tag_of(p);
}

/// The span tag of `p`: the mark of an object free in its span (returned, or never handed out)
/// (the cached tag inverted, so the two never match each other, nor 0).
inline std::uint64_t span_tag_of(const void* p) noexcept {
  return ~detail_tag::tag_of(p);
}

/// cached_tag_of() for `p`, an object of a span (whose making set the key already): no test
/// of the key, and so no call, on the fast paths.
inline std::uint64_t span_object_cached_tag(const void* p) noexcept {
  return __atomic_load_n(&detail_tag::g_key, __ATOMIC_RELAXED) ^
         reinterpret_cast<std::uintptr_t>(p);
}

/// True when small object `p` is held by a user: its word carries neither tag.
inline bool held_by_user(const void* p) noexcept {
  const std::uint64_t word = static_cast<const std::uint64_t*>(p)[1];
  return word != cached_tag_of(p) && word != span_tag_of(p);
}

}  // namespace percpu::malloc_impl
