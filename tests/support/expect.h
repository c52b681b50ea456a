// What the test pass expects of the process: scripts/run-tests.sh runs the suite three times and
// says, through PERCPU_EXPECT, which owner the rseq area must have in each (glibc, percpu, or
// fallback). Unset: the test that checks it is skipped, the others adapt to the mode found.
#pragma once

#include <cstdlib>
#include <string>

namespace percpu::test {

inline std::string expected_mode() {
  const char* e = std::getenv("PERCPU_EXPECT");
  return e ? e : "";
}

}  // namespace percpu::test
