#include "common/child_process.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>

#include <fmt/core.h>

extern char** environ;

namespace percpu::cli {
namespace {

std::vector<std::string> child_environment(const child_request& r) {
  auto named = [](const std::string& entry, const std::string& name) {
    return entry.size() > name.size() && entry.compare(0, name.size(), name) == 0 &&
           entry[name.size()] == '=';
  };
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry = *e;
    bool drop = false;
    for (const auto& name : r.unset_env) drop = drop || named(entry, name);
    for (const auto& set : r.set_env) drop = drop || named(entry, set.substr(0, set.find('=')));
    if (!drop) env.push_back(entry);
  }
  env.insert(env.end(), r.set_env.begin(), r.set_env.end());
  return env;
}

[[noreturn]] void exec_child(const child_request& r, std::vector<std::string> env, pid_t parent,
                             int out_fd, int err_fd) {
  // Dies with us: a report or suite stopped by a signal leaves no benchmark running (each
  // level sets this for its own children, so the whole tree goes).
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(127);  // we were already orphaned before prctl took effect
  if (r.new_process_group) setpgid(0, 0);
  if (r.cpu >= 0) {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(r.cpu, &one);
    sched_setaffinity(0, sizeof one, &one);
  }
  if (!r.cwd.empty() && chdir(r.cwd.c_str()) != 0) _exit(127);
  dup2(out_fd, STDOUT_FILENO);
  dup2(err_fd, STDERR_FILENO);
  std::vector<std::string> args = r.argv;
  std::vector<char*> argv, envp;
  for (auto& s : args) argv.push_back(s.data());
  argv.push_back(nullptr);
  for (auto& s : env) envp.push_back(s.data());
  envp.push_back(nullptr);
  execve(args[0].c_str(), argv.data(), envp.data());
  _exit(127);
}

}  // namespace

bool child_result::ok() const {
  return started && !timed_out && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

std::string child_result::describe(int timeout_s) const {
  if (!started) return "could not be started";
  if (timed_out) return fmt::format("timed out after {} s", timeout_s);
  if (WIFSIGNALED(status)) return fmt::format("signal {}", WTERMSIG(status));
  return fmt::format("exit status {}", WEXITSTATUS(status));
}

child_result run_child(const child_request& r) {
  child_result result;
  if (r.argv.empty()) return result;
  int out[2], err[2];
  if (pipe2(out, O_CLOEXEC) != 0) return result;
  if (pipe2(err, O_CLOEXEC) != 0) {
    close(out[0]);
    close(out[1]);
    return result;
  }
  std::vector<std::string> env = child_environment(r);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid == 0) exec_child(r, std::move(env), parent, out[1], err[1]);
  close(out[1]);
  close(err[1]);
  if (pid < 0) {
    close(out[0]);
    close(err[0]);
    return result;
  }
  result.started = true;
  if (r.new_process_group) setpgid(pid, pid);  // both sides: whichever runs first
  if (r.on_started) r.on_started(pid);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(r.timeout_s);
  pollfd fds[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
  int open_fds = 2;
  char buf[8192];
  // The child's exit ends the wait even when something it started in the background still
  // holds its pipes open: once it has exited, what is left to read is read, then we stop.
  bool exited = false;
  while (open_fds > 0) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      result.timed_out = true;
      kill(r.new_process_group ? -pid : pid, SIGKILL);
      break;
    }
    const int n = poll(fds, 2, exited ? 0 : static_cast<int>(std::min<long>(left.count(), 200)));
    if (n < 0 && errno != EINTR) break;
    if (n == 0) {
      if (exited) break;
      exited = waitpid(pid, &result.status, WNOHANG) == pid;
      continue;
    }
    for (int i = 0; i < 2 && n > 0; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      const ssize_t got = read(fds[i].fd, buf, sizeof buf);
      if (got <= 0) {
        close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
        continue;
      }
      const std::string_view chunk(buf, static_cast<std::size_t>(got));
      if (i == 0) {
        result.out.append(chunk);
      } else if (r.on_stderr) {
        r.on_stderr(chunk);
      } else {
        result.err.append(chunk);
      }
    }
  }
  for (auto& f : fds)
    if (f.fd >= 0) close(f.fd);
  if (!exited)
    while (waitpid(pid, &result.status, 0) < 0 && errno == EINTR) {
    }
  return result;
}

std::string find_program(const std::string& name) {
  if (name.find('/') != std::string::npos) return access(name.c_str(), X_OK) == 0 ? name : "";
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/local/bin:/usr/bin:/bin";
  std::size_t start = 0;
  while (start <= dirs.size()) {
    const std::size_t end = std::min(dirs.find(':', start), dirs.size());
    const std::string dir = dirs.substr(start, end - start);
    const std::string candidate = (dir.empty() ? "." : dir) + "/" + name;
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
    start = end + 1;
  }
  return {};
}

std::string self_dir() {
  char buf[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return ".";
  std::string p(buf, static_cast<std::size_t>(n));
  return p.substr(0, p.rfind('/'));
}

bool readable(const std::string& path) {
  return access(path.c_str(), R_OK) == 0;
}

std::string find_library_beside(const std::string& dir, const std::string& file) {
  for (const std::string& candidate :
       {dir + "/../../" + file, dir + "/../lib/" + file, dir + "/../lib64/" + file,
        dir + "/../lib/x86_64-linux-gnu/" + file, dir + "/../lib/aarch64-linux-gnu/" + file})
    if (readable(candidate)) return candidate;
  return {};
}

}  // namespace percpu::cli
