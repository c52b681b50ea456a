// percpu's last fork stage: the allocator's fork handlers, then fallback mode's stripes, with
// signals blocked on the forking thread (see fork_order.h).
#include "percpu/fork_order.h"

#include <pthread.h>
#include <signal.h>

#include <atomic>

#include "percpu/fallback.h"

namespace percpu::detail {
namespace {

std::atomic<void (*)()> g_prepare{nullptr}, g_parent{nullptr}, g_child{nullptr};

// The forking thread's signal mask before the stage (restored in parent and child).
__attribute__((tls_model("initial-exec"))) thread_local sigset_t t_saved_mask;

void run(const std::atomic<void (*)()>& handler) {
  if (auto* f = handler.load(std::memory_order_acquire)) f();
}

void prepare() {
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &t_saved_mask);
  run(g_prepare);
  fallback_locks_before_fork();
}

void after(const std::atomic<void (*)()>& handler) {
  fallback_locks_after_fork();
  run(handler);
  pthread_sigmask(SIG_SETMASK, &t_saved_mask, nullptr);
}

void parent() {
  after(g_parent);
}
void child() {
  after(g_child);
}

// Priority 101: before libpercpu's other constructors (which register their own handlers), so
// that this prepare handler runs after theirs.
__attribute__((constructor(101))) void register_last_stage() {
  pthread_atfork(prepare, parent, child);
}

}  // namespace

void set_allocator_fork_handlers(void (*prepare_handler)(), void (*parent_handler)(),
                                 void (*child_handler)()) noexcept {
  g_parent.store(parent_handler, std::memory_order_release);
  g_child.store(child_handler, std::memory_order_release);
  g_prepare.store(prepare_handler, std::memory_order_release);
}

}  // namespace percpu::detail
