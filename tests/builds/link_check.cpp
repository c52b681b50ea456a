// Built as PIE, non-PIE, static and LTO programs: checks that percpu finds the rseq owner the
// test pass expects (PERCPU_EXPECT), i.e. that glibc's weak __rseq_* symbols resolved.
#include <percpu/percpu.h>
#include <cstdio>
#include <cstring>

#include "expect.h"

int main() {
  const auto reg = percpu::registration();
  const std::string found = reg.fallback ? "fallback" : percpu::to_string(reg.owner);
  const std::string expected = percpu::test::expected_mode();
  std::printf("owner=%s fallback=%d glibc_symbols=%d __rseq_size=%u cpu=%d\n",
              percpu::to_string(reg.owner), reg.fallback, reg.glibc_symbols, reg.glibc_rseq_size,
              percpu::current_cpu());
  if (!reg.glibc_symbols) {
    std::printf("FAIL: __rseq_offset/__rseq_size did not resolve\n");
    return 1;
  }
  if (!expected.empty() && found != expected) {
    std::printf("FAIL: expected %s, found %s\n", expected.c_str(), found.c_str());
    return 1;
  }
  std::printf("1 passed, 0 failed\n");
  return 0;
}
