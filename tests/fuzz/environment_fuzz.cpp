// Fuzz target: the environment variables percpu and percpu malloc read, through the parsers the
// library calls on them (src/glibc_tunables.h, src/malloc/env_parse.h). The input is a value
// (bytes up to the first NUL, as getenv() would give it); every parser reads it, and each
// answer is checked against a model written here with std::string:
// - GLIBC_TUNABLES: name=value entries split on ':', the last glibc.pthread.rseq one decides,
//   and only the value 0 turns glibc's rseq registration off;
// - PERCPU_MALLOC_CPU_CACHE_BYTES: decimal digits only, at most 2^40, or refused (the caller
//   keeps its 3 MiB default);
// - PERCPU_MALLOC_BACKGROUND: on for exactly "1"; PERCPU_MALLOC_STATS: on for any non-empty
//   value but "0"; PERCPU_MALLOC_STATS_FILE: the value itself when non-empty.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_check.h"
#include "glibc_tunables.h"
#include "malloc/env_parse.h"

namespace {

namespace env = percpu::malloc_impl::env;

bool model_tunables(const std::string& value) {
  bool disabled = false;
  std::size_t from = 0;
  for (;;) {
    const std::size_t colon = value.find(':', from);
    const std::string entry = value.substr(from, colon == std::string::npos ? colon : colon - from);
    const std::size_t equals = entry.find('=');
    if (equals != std::string::npos && entry.substr(0, equals) == "glibc.pthread.rseq")
      disabled = entry.substr(equals + 1) == "0";
    if (colon == std::string::npos) return disabled;
    from = colon + 1;
  }
}

// The byte count, or -1 when refused.
long long model_cache_budget(const std::string& value) {
  if (value.empty()) return -1;
  for (char c : value)
    if (c < '0' || c > '9') return -1;
  const std::string digits = value.substr(std::min(value.find_first_not_of('0'), value.size()));
  if (digits.size() > 13) return -1;  // 2^40 has 13 digits
  const long long v = digits.empty() ? 0 : std::stoll(digits);
  return v <= (1ll << 40) ? v : -1;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string value(reinterpret_cast<const char*>(data), size);
  value.resize(value.find('\0') == std::string::npos ? value.size() : value.find('\0'));
  const char* text = value.c_str();

  FUZZ_CHECK(percpu::detail::tunables_disable_rseq(text) == model_tunables(value));

  constexpr std::size_t kUntouched = 0x5eed;
  std::size_t budget = kUntouched;
  const long long expected = model_cache_budget(value);
  const bool parsed = env::parse_cache_budget(text, &budget);
  FUZZ_CHECK_MSG(parsed == (expected >= 0), "'%s': parsed %d", text, parsed);
  FUZZ_CHECK(parsed ? budget == static_cast<std::size_t>(expected) : budget == kUntouched);
  FUZZ_CHECK(budget <= env::kMaxCacheBudget || !parsed);

  FUZZ_CHECK(env::background_enabled(text) == (value == "1"));
  FUZZ_CHECK(env::stats_enabled(text) == (!value.empty() && value != "0"));
  FUZZ_CHECK(env::stats_file(text) == (value.empty() ? nullptr : text));

  // Unset variables.
  FUZZ_CHECK(!percpu::detail::tunables_disable_rseq(nullptr));
  FUZZ_CHECK(!env::parse_cache_budget(nullptr, &budget));
  FUZZ_CHECK(!env::background_enabled(nullptr) && !env::stats_enabled(nullptr) &&
             env::stats_file(nullptr) == nullptr);
  return 0;
}
