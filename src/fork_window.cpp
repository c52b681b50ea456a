// fork_window: a count of open windows and a flag that a fork() waits on them.
#include "fork_window.h"

#include <sched.h>

#include <atomic>

#include "fork_order.h"

namespace percpu::detail {
namespace {

// Not a pthread_rwlock_t: one taken for writing before fork() cannot be released in the
// child, whose thread id differs; and windows are rare and short, so a yield loop serves.
std::atomic<int> g_open{0};
std::atomic<bool> g_forking{false};

__attribute__((constructor)) void register_fork_handlers() {
  set_fork_handlers(fork_stage::windows, fork_windows_close, fork_windows_reopen,
                    fork_windows_reopen_in_child);
}

}  // namespace

fork_window::fork_window() noexcept {
  for (;;) {
    while (g_forking.load(std::memory_order_seq_cst)) sched_yield();
    g_open.fetch_add(1, std::memory_order_seq_cst);
    if (!g_forking.load(std::memory_order_seq_cst)) return;
    g_open.fetch_sub(1, std::memory_order_seq_cst);  // a fork() began: wait it out
  }
}

fork_window::~fork_window() {
  g_open.fetch_sub(1, std::memory_order_seq_cst);
}

void fork_windows_close() noexcept {
  g_forking.store(true, std::memory_order_seq_cst);
  while (g_open.load(std::memory_order_seq_cst) != 0) sched_yield();
}

void fork_windows_reopen() noexcept {
  g_forking.store(false, std::memory_order_seq_cst);
}

void fork_windows_reopen_in_child() noexcept {
  g_open.store(0, std::memory_order_relaxed);
  fork_windows_reopen();
}

}  // namespace percpu::detail
