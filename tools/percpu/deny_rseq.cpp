// `percpu deny-rseq`: run a program on which rseq(2) fails, the way valgrind (ENOSYS) or a
// container's seccomp profile (EPERM) makes it fail, so fallback mode can be tested for real.
// It can make membarrier(2) fail instead or as well (kernels before 5.10 lack its RSEQ command),
// so that the fences' method of last resort runs too.
#include <seccomp.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <iostream>

#include "commands.h"

namespace percpu::cli {

int deny_rseq_exec(int err, bool rseq, bool membarrier, const std::vector<std::string>& argv) {
  if (argv.empty()) {
    std::cerr << "percpu deny-rseq: no command given\n";
    return 2;
  }
  scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
  if (ctx == nullptr) {
    std::cerr << "percpu deny-rseq: seccomp_init failed\n";
    return 1;
  }
  int rc = 0;
  if (rseq) rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(err), SCMP_SYS(rseq), 0);
  if (rc == 0 && membarrier)
    rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(err), SCMP_SYS(membarrier), 0);
  if (rc == 0) rc = seccomp_load(ctx);  // also sets no_new_privs
  seccomp_release(ctx);
  if (rc != 0) {
    std::cerr << "percpu deny-rseq: cannot install the seccomp filter: " << std::strerror(-rc)
              << "\n";
    return 1;
  }
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  execvp(args[0], args.data());
  std::cerr << "percpu deny-rseq: cannot run " << argv[0] << ": " << std::strerror(errno) << "\n";
  return 127;
}

}  // namespace percpu::cli
