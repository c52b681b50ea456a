// Windows that fork() does not split: a thread that changes a shared object in several steps
// (percpu_rwsem's try_lock(), a writer's closing and release of the gate; percpu_ref's kill()
// and resurrect()) opens one for those steps, and fork() waits until none is open, so a child
// never inherits such a change half done.
#pragma once

namespace percpu::detail {

/// While one lives, no fork() copies the process: a fork() that starts meanwhile waits (in its
/// first prepare stage) until every window has closed, and a window that opens while a fork()
/// runs waits until it is over. Keep the window short and call no user code inside it (a
/// callback that forks from inside its own window would wait for itself). Not in a signal
/// handler (it may wait for a fork on its own thread).
/// Windows nest (they are a count).
class fork_window {
 public:
  fork_window() noexcept;
  ~fork_window();
  fork_window(const fork_window&) = delete;
  fork_window& operator=(const fork_window&) = delete;
};

/// The first fork stage's handlers (fork_order.cpp): waits until no window is open and keeps
/// new ones from opening; lets them open again in the parent; in the child (where the threads
/// that waited to open one are gone), the same.
void fork_windows_close() noexcept;
void fork_windows_reopen() noexcept;
void fork_windows_reopen_in_child() noexcept;

}  // namespace percpu::detail
