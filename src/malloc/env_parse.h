// How percpu malloc reads its environment variables (docs/malloc.md): each value's parse, apart
// from the getenv() that finds it, so that tests/fuzz/environment_fuzz.cpp can feed it any
// bytes. They run while the allocator initializes or at exit: no allocation, no exception.
#pragma once

#include <cstddef>

namespace percpu::malloc_impl::env {

/// The largest PERCPU_MALLOC_CPU_CACHE_BYTES.
inline constexpr std::size_t kMaxCacheBudget = std::size_t{1} << 40;

/// PERCPU_MALLOC_CPU_CACHE_BYTES: decimal digits only (no sign, no blank, not empty), at most
/// 2^40. Stores the value in `*out` and returns true; false for anything else (`*out`
/// unchanged), and the caller keeps its default.
inline bool parse_cache_budget(const char* text, std::size_t* out) noexcept {
  if (text == nullptr || *text == '\0') return false;
  std::size_t v = 0;
  for (const char* c = text; *c != '\0'; ++c) {
    // v * 10 + 9 cannot wrap below this, and above it the value is out of range anyway.
    if (*c < '0' || *c > '9' || v > kMaxCacheBudget / 10) return false;
    v = v * 10 + static_cast<std::size_t>(*c - '0');
  }
  if (v > kMaxCacheBudget) return false;
  *out = v;
  return true;
}

/// PERCPU_MALLOC_BACKGROUND: on for exactly "1".
inline bool background_enabled(const char* text) noexcept {
  return text != nullptr && text[0] == '1' && text[1] == '\0';
}

/// PERCPU_MALLOC_STATS: on for any non-empty value but "0".
inline bool stats_enabled(const char* text) noexcept {
  return text != nullptr && text[0] != '\0' && !(text[0] == '0' && text[1] == '\0');
}

/// PERCPU_MALLOC_STATS_FILE: the path to append the statistics to, or nullptr (unset or empty:
/// PERCPU_MALLOC_STATS decides).
inline const char* stats_file(const char* text) noexcept {
  return text != nullptr && text[0] != '\0' ? text : nullptr;
}

}  // namespace percpu::malloc_impl::env
