// Runs another program (a benchmark under LD_PRELOAD, a suite of this command) as a child
// process: its own environment changes, an optional CPU, a timeout, and its output captured.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace percpu::cli {

/// What to run and how.
struct child_request {
  std::vector<std::string> argv;       ///< argv[0] is the program's path (or a name in PATH)
  std::vector<std::string> set_env;    ///< "NAME=value" entries added to (or replacing in) ours
  std::vector<std::string> unset_env;  ///< names removed from our environment
  std::string cwd;                     ///< run in this directory when not empty
  int cpu = -1;                        ///< pin the child to this CPU when not negative
  int timeout_s = 600;                 ///< SIGKILL after this many seconds
  /// Start the child in a process group of its own (its descendants join it), so that the
  /// caller can stop the whole tree with kill(-pid, SIGKILL); see on_started.
  bool new_process_group = false;
  /// Called with the child's pid once it runs (for a stop handler of the caller's).
  std::function<void(int pid)> on_started;
  /// Called with each chunk of the child's standard error as it arrives; when empty, the
  /// child's standard error is collected into child_result::err instead.
  std::function<void(std::string_view)> on_stderr;
};

/// How it went.
struct child_result {
  bool started = false;    ///< false: fork, pipe or exec failed (status 127 for exec)
  bool timed_out = false;  ///< killed after timeout_s
  int status = 0;          ///< as waitpid(2) reports it
  std::string out;         ///< everything the child wrote to standard output
  std::string err;         ///< its standard error, when no on_stderr callback took it
  /// True when the child exited by itself with status 0.
  bool ok() const;
  /// "exit status N", "signal N" or "timed out after N s", for messages.
  std::string describe(int timeout_s) const;
};

/// Runs the request to completion (or its timeout) and returns the outcome.
child_result run_child(const child_request& request);

/// The full path of `name` in PATH (or `name` itself when it contains '/'), empty if not found.
std::string find_program(const std::string& name);

/// The directory of this executable (/proc/self/exe), "." if unknown.
std::string self_dir();

/// True when `path` exists and is readable.
bool readable(const std::string& path);

/// A library of this build tree (build/<preset>/, two levels above the percpu command) or of
/// this install (<prefix>/lib*), found from the command's directory `dir`; empty if neither.
std::string find_library_beside(const std::string& dir, const std::string& file);

}  // namespace percpu::cli
