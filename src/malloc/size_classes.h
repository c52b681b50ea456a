// percpu malloc's size classes: the object sizes small allocations are rounded up to, the span
// (run of pages) each class carves its objects from, and the batch moved between the per-CPU
// caches and the central free lists. Built at compile time, so malloc needs no initialization
// to look a size up (it may be called before any constructor runs).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace percpu::malloc_impl {

/// Every object is aligned on this many bytes (malloc's guarantee on x86-64, max_align_t).
inline constexpr std::size_t kAlignment = 16;
/// Page of the page heap: spans are whole pages (8 KiB, as in tcmalloc; two kernel pages).
inline constexpr unsigned kPageShift = 13;
inline constexpr std::size_t kPageSize = std::size_t{1} << kPageShift;
/// Largest size served by a size class; larger allocations are mapped directly.
inline constexpr std::size_t kMaxSmallSize = 256 * 1024;

/// One size class.
struct size_class_info {
  std::uint32_t size = 0;   ///< object bytes (a multiple of kAlignment)
  std::uint32_t pages = 0;  ///< pages per span
  std::uint32_t batch = 0;  ///< objects moved per transfer between a per-CPU cache and central
  constexpr std::uint32_t objects_per_span() const { return pages * kPageSize / size; }
};

namespace detail {

// Sizes: 16 to 128 in steps of 16, then four classes per doubling (160, 192, 224, 256, 320, ...)
// up to kMaxSmallSize: at most 25% rounding waste above 128 bytes, 12.5% on average.
constexpr std::size_t count_classes() {
  std::size_t n = 128 / kAlignment;
  for (std::size_t base = 128; base < kMaxSmallSize; base *= 2) n += 4;
  return n + 1;  // class 0 is "no class" (large)
}

}  // namespace detail

/// Number of size classes, class 0 (large) included.
inline constexpr std::size_t kClassCount = detail::count_classes();

namespace detail {

// The fewest pages that hold the class's objects with at most 1/8 of the span left over, and at
// least 8 objects (or one object, for sizes above 64 KiB).
constexpr std::uint32_t span_pages(std::size_t size) {
  const std::size_t min_objects = size > 64 * 1024 ? 1 : (size > 8 * 1024 ? 2 : 8);
  std::size_t pages = (size * min_objects + kPageSize - 1) / kPageSize;
  while ((pages * kPageSize) % size > pages * kPageSize / 8) ++pages;
  return static_cast<std::uint32_t>(pages);
}

// Objects moved per refill or flush: 64 KiB worth, between 2 and 64, and 128 for classes up to
// 128 bytes. A batch is one lock of the class's central list for the objects it moves, and one
// pass of the caches' bookkeeping (64 rather than 32 small objects: xmalloc-test, one
// producer's objects freed by another thread, ran 19% faster; 128 rather than 64 objects of up
// to 128 bytes: 1.3x). Larger classes keep 64: every object parked in a transfer cache can pin
// a span, and a program that frees in random order and stops would keep twice the spans.
constexpr std::uint32_t batch_for(std::size_t size) {
  const std::size_t b = 64 * 1024 / size;
  const std::size_t most = size <= 128 ? 128 : 64;
  return static_cast<std::uint32_t>(b < 2 ? 2 : (b > most ? most : b));
}

constexpr std::array<size_class_info, kClassCount> make_classes() {
  std::array<size_class_info, kClassCount> c{};
  std::size_t i = 1;
  auto add = [&](std::size_t size) {
    c[i++] = size_class_info{static_cast<std::uint32_t>(size), span_pages(size), batch_for(size)};
  };
  for (std::size_t s = kAlignment; s <= 128; s += kAlignment) add(s);
  for (std::size_t base = 128; base < kMaxSmallSize; base *= 2)
    for (std::size_t k = 1; k <= 4; ++k) add(base + k * base / 4);
  return c;
}

}  // namespace detail

/// The classes, indexed 1 .. kClassCount - 1 in increasing size.
inline constexpr std::array<size_class_info, kClassCount> kClasses = detail::make_classes();

namespace detail {
// is_object_start()'s constants of a class, side by side (one line of the table): ceil(2^64 /
// size), and the bytes of the span's objects (objects_per_span * size), beyond which lies the
// span's tail, shorter than an object. Zero for class 0.
struct start_check {
  std::uint64_t multiplier;
  std::uint64_t objects_bytes;
};
constexpr std::array<start_check, kClassCount> make_start_checks() {
  std::array<start_check, kClassCount> c{};
  for (std::size_t i = 1; i < kClassCount; ++i)
    c[i] = {UINT64_MAX / kClasses[i].size + 1,
            std::uint64_t{kClasses[i].objects_per_span()} * kClasses[i].size};
  return c;
}
inline constexpr auto kStartChecks = make_start_checks();
}  // namespace detail

/// Whether `offset` (bytes from its span's first byte; below 2^32) is the start of an object of
/// class `cls`: a multiple of its size, and not in the span's tail (where an object would run
/// into the next span). The multiple test takes one multiply and a compare, no division: with
/// c = ceil(2^64 / size), offset * c mod 2^64 < c exactly when size divides offset, for every
/// offset and size below 2^32 (Lemire, Kaser and Kurz, "Faster remainder by direct
/// computation", 2019). free's interior-pointer check, on its fast path.
inline bool is_object_start(std::size_t cls, std::uint64_t offset) noexcept {
  const detail::start_check& k = detail::kStartChecks[cls];
  return (offset * k.multiplier < k.multiplier) & (offset < k.objects_bytes);
}

namespace detail {

// Lookup tables: sizes up to 1024 in steps of 16, larger ones in steps of 128.
inline constexpr std::size_t kSmallStep = 16, kLargeStep = 128, kSmallLimit = 1024;

constexpr std::uint8_t class_by_scan(std::size_t size) {
  for (std::size_t i = 1; i < kClassCount; ++i)
    if (kClasses[i].size >= size) return static_cast<std::uint8_t>(i);
  return 0;
}

template <std::size_t N, std::size_t Step>
constexpr std::array<std::uint8_t, N> make_lookup() {
  std::array<std::uint8_t, N> t{};
  for (std::size_t k = 0; k < N; ++k) t[k] = class_by_scan(k * Step);
  return t;
}

inline constexpr auto kSmallLookup = make_lookup<kSmallLimit / kSmallStep + 1, kSmallStep>();
inline constexpr auto kLargeLookup = make_lookup<kMaxSmallSize / kLargeStep + 1, kLargeStep>();

constexpr bool every_entry_has_a_class(
    const std::array<std::uint8_t, kSmallLimit / kSmallStep + 1>& t) {
  for (std::uint8_t c : t)
    if (c == 0) return false;
  return true;
}
// malloc's fast path relies on it (fast_path.h: no test of class 0 for small sizes).
static_assert(every_entry_has_a_class(kSmallLookup));

/// size_class_of() for `size` at most kSmallLimit: one table load, never 0.
inline std::size_t small_class_of(std::size_t size) noexcept {
  return kSmallLookup[(size + kSmallStep - 1) / kSmallStep];
}

}  // namespace detail

/// The class of an allocation of `size` bytes: the smallest class at least that big, or 0 for
/// sizes above kMaxSmallSize (mapped directly). Size 0 gets the smallest class.
inline std::size_t size_class_of(std::size_t size) noexcept {
  if (size <= detail::kSmallLimit) return detail::small_class_of(size);
  if (size <= kMaxSmallSize)
    return detail::kLargeLookup[(size + detail::kLargeStep - 1) / detail::kLargeStep];
  return 0;
}

}  // namespace percpu::malloc_impl
