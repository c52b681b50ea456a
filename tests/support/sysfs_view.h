// Test helper: runs a program in a child process that has a private mount namespace in which
// /sys/devices/system/cpu/possible and /online show a chosen CPU list (as a container's
// lxcfs-style view or a bind-mounted file can), optionally pinned to one CPU.
#pragma once

#include <sched.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace percpu::test {

struct view_run {
  int status = -1;   ///< exit status; 77 when the view could not be set up (see skip)
  std::string out;   ///< stdout and stderr
  std::string skip;  ///< why the view could not be made, when status is 77
};

/// Runs argv[0] with `argv` under a sysfs view listing `cpus` (e.g. "0") as possible and
/// online, on CPU `pin` (or unpinned when pin < 0).
inline view_run run_in_sysfs_view(const std::string& cpus, int pin,
                                  const std::vector<std::string>& argv) {
  int fds[2];
  view_run r;
  if (pipe(fds) != 0) return r;
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    dup2(fds[1], 1);
    dup2(fds[1], 2);
    auto skip = [](const char* what) {
      std::printf("SKIP: %s: %s\n", what, std::strerror(errno));
      std::fflush(stdout);
      _exit(77);
    };
    if (unshare(CLONE_NEWNS) != 0) skip("unshare(CLONE_NEWNS)");
    if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) skip("make / private");
    char file[] = "/tmp/percpu-view-XXXXXX";
    const int fd = mkstemp(file);
    if (fd < 0) skip("mkstemp");
    const std::string text = cpus + "\n";
    if (write(fd, text.data(), text.size()) != static_cast<ssize_t>(text.size())) skip("write");
    close(fd);
    for (const char* target :
         {"/sys/devices/system/cpu/possible", "/sys/devices/system/cpu/online"})
      if (mount(file, target, nullptr, MS_BIND, nullptr) != 0) skip(target);
    unlink(file);  // the bind mounts keep it
    if (pin >= 0) {
      cpu_set_t one;
      CPU_ZERO(&one);
      CPU_SET(pin, &one);
      if (sched_setaffinity(0, sizeof(one), &one) != 0) skip("sched_setaffinity");
    }
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    std::printf("cannot run %s: %s\n", args[0], std::strerror(errno));
    _exit(127);
  }
  close(fds[1]);
  char buf[4096];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof buf)) > 0) r.out.append(buf, static_cast<size_t>(n));
  close(fds[0]);
  int st = 0;
  waitpid(pid, &st, 0);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  if (r.status == 77) r.skip = r.out;
  return r;
}

}  // namespace percpu::test
