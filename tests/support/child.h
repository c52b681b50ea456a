// Test helper: runs a body in a forked child (for tests that change process-wide state, such as
// the one-way switch to fallback mode). The child's exit status is the body's return value; a
// child that hangs is killed by alarm() after `seconds`.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

namespace percpu::test {

template <class F>
int in_child(F&& body, unsigned seconds = 60) {
  const pid_t pid = fork();
  if (pid == 0) {
    alarm(seconds);
    _exit(body());
  }
  int st = 0;
  waitpid(pid, &st, 0);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 100 + WTERMSIG(st);
}

}  // namespace percpu::test
