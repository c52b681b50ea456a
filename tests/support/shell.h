// Test helper: runs a shell command line and collects its standard output and exit status.
#pragma once

#include <cstdio>
#include <string>

namespace percpu::test {

struct shell_result {
  int status = -1;  ///< as pclose() returns it (exit code in bits 8-15); -1 when it could not run
  std::string out;  ///< standard output (add 2>&1 to the command for standard error too)
};

/// Runs `cmd` with /bin/sh and waits for it.
inline shell_result shell(const std::string& cmd) {
  shell_result r;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  r.status = pclose(p);
  return r;
}

}  // namespace percpu::test
