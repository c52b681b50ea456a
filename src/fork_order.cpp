// percpu's last fork stage: the allocator's fork handlers, then fallback mode's stripes, with
// signals blocked on the forking thread (see fork_order.h).
#include "percpu/fork_order.h"

#include <pthread.h>
#include <signal.h>

#include <atomic>

#include "percpu/fallback.h"

namespace percpu::detail {
namespace {

struct allocator_handlers {
  void (*prepare)();
  void (*parent)();
  void (*child)();
  std::atomic<bool> ready;  // set once the three pointers above are written
};
allocator_handlers g_allocators[kMaxForkAllocators];
std::atomic<int> g_claimed{0};

int installed() {
  const int n = g_claimed.load(std::memory_order_acquire);
  return n < kMaxForkAllocators ? n : kMaxForkAllocators;
}

// The forking thread's signal mask before the stage (restored in parent and child).
__attribute__((tls_model("initial-exec"))) thread_local sigset_t t_saved_mask;

void prepare() {
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &t_saved_mask);
  for (int i = installed() - 1; i >= 0; --i)
    if (g_allocators[i].ready.load(std::memory_order_acquire)) g_allocators[i].prepare();
  fallback_locks_before_fork();
}

void after(bool child) {
  fallback_locks_after_fork();
  for (int i = 0, n = installed(); i < n; ++i) {
    const allocator_handlers& a = g_allocators[i];
    if (a.ready.load(std::memory_order_acquire)) (child ? a.child : a.parent)();
  }
  pthread_sigmask(SIG_SETMASK, &t_saved_mask, nullptr);
}

void parent() {
  after(false);
}
void child() {
  after(true);
}

std::atomic<bool> g_registered{false};

// Priority 101: before libpercpu's other constructors (which register their own handlers), so
// that this prepare handler runs after theirs. (initialize() registers it too, first, when it
// runs before the constructors: a malloc call from the C library's start-up under percpu
// malloc's preload.)
__attribute__((constructor(101))) void register_last_stage() {
  register_fork_stages();
}

}  // namespace

void register_fork_stages() noexcept {
  if (!g_registered.exchange(true, std::memory_order_acq_rel))
    pthread_atfork(prepare, parent, child);
}

bool add_allocator_fork_handlers(void (*prepare_handler)(), void (*parent_handler)(),
                                 void (*child_handler)()) noexcept {
  const int i = g_claimed.fetch_add(1, std::memory_order_acq_rel);
  if (i >= kMaxForkAllocators) return false;
  g_allocators[i].prepare = prepare_handler;
  g_allocators[i].parent = parent_handler;
  g_allocators[i].child = child_handler;
  g_allocators[i].ready.store(true, std::memory_order_release);
  return true;
}

}  // namespace percpu::detail
