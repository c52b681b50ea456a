// What percpu reads of GLIBC_TUNABLES (runtime.cpp: why glibc registered no rseq area), apart
// from the getenv() that finds it, so that tests/fuzz/environment_fuzz.cpp can feed it any bytes.
#pragma once

#include <cstring>

namespace percpu::detail {

/// True when `tunables` (GLIBC_TUNABLES' value; nullptr when unset) turns glibc's rseq
/// registration off: glibc reads it as name=value entries separated by ':', the last entry of a
/// name wins, and glibc.pthread.rseq=0 is the documented way. Entries without '=' are skipped.
inline bool tunables_disable_rseq(const char* tunables) noexcept {
  static constexpr char kName[] = "glibc.pthread.rseq";
  constexpr std::size_t kNameLength = sizeof kName - 1;
  if (tunables == nullptr) return false;
  bool disabled = false;
  for (const char* entry = tunables;;) {
    const char* end = std::strchr(entry, ':');
    const std::size_t length =
        end != nullptr ? static_cast<std::size_t>(end - entry) : std::strlen(entry);
    if (length > kNameLength && entry[kNameLength] == '=' &&
        std::strncmp(entry, kName, kNameLength) == 0)
      disabled = length == kNameLength + 2 && entry[kNameLength + 1] == '0';
    if (end == nullptr) return disabled;
    entry = end + 1;
  }
}

}  // namespace percpu::detail
