// percpu's fork() handlers: the library's stages, the allocators' handlers, then fallback mode's
// stripes, with signals blocked on the forking thread (see fork_order.h).
#include "fork_order.h"

#include <pthread.h>
#include <signal.h>

#include <atomic>

#include "signals_blocked.h"

namespace percpu::detail {
namespace {

// Every member initialized, and every table constinit: the tables must hold their zeros before
// any code runs. initialize() sets the runtime's stage from the first malloc call of a program
// under percpu malloc's preload, before this file's dynamic initializers would have run; a
// table initialized dynamically would then clear that stage's `ready` after it was set.
struct handlers {
  void (*prepare)() = nullptr;
  void (*parent)() = nullptr;
  void (*child)() = nullptr;
  std::atomic<bool> ready{false};  // set once the three pointers above are written
};

constexpr int kStages = static_cast<int>(fork_stage::runtime) + 1;
constinit handlers g_stages[kStages]{};

constinit handlers g_allocators[kMaxForkAllocators]{};
constinit std::atomic<int> g_claimed{0};

int installed() {
  const int n = g_claimed.load(std::memory_order_acquire);
  return n < kMaxForkAllocators ? n : kMaxForkAllocators;
}

void run(void (*handler)()) {
  if (handler != nullptr) handler();
}

// The forking thread's signal mask before the prepare handler (restored in parent and child).
__attribute__((tls_model("initial-exec"))) thread_local sigset_t t_saved_mask;

// Held from prepare() to after(), and by every change of the tables: a stage or an allocator
// set while a fork is in progress would otherwise be unlocked by after() without having been
// locked by prepare() (the first pool, built while another thread forks, did that). A thread
// that sets one waits for the fork to end, as pthread_atfork() itself does.
pthread_mutex_t g_tables_lock = PTHREAD_MUTEX_INITIALIZER;

void prepare() {
  block_all_signals(t_saved_mask);
  pthread_mutex_lock(&g_tables_lock);
  for (handlers& s : g_stages)
    if (s.ready.load(std::memory_order_acquire)) run(s.prepare);
  for (int i = installed() - 1; i >= 0; --i)
    if (g_allocators[i].ready.load(std::memory_order_acquire)) run(g_allocators[i].prepare);
  fallback_locks_before_fork();
}

void after(bool child) {
  fallback_locks_after_fork();
  for (int i = 0, n = installed(); i < n; ++i) {
    const handlers& a = g_allocators[i];
    if (a.ready.load(std::memory_order_acquire)) run(child ? a.child : a.parent);
  }
  for (int i = kStages - 1; i >= 0; --i) {
    const handlers& s = g_stages[i];
    if (s.ready.load(std::memory_order_acquire)) run(child ? s.child : s.parent);
  }
  pthread_mutex_unlock(&g_tables_lock);
  restore_signals(t_saved_mask);
}

void parent() {
  after(false);
}
void child() {
  after(true);
}

constinit std::atomic<bool> g_registered{false};

// Priority 101: before libpercpu's other constructors and before the program's, so that the
// program's own prepare handlers run before this one.
__attribute__((constructor(101))) void register_at_load() {
  register_fork_stages();
}

}  // namespace

void register_fork_stages() noexcept {
  if (!g_registered.exchange(true, std::memory_order_acq_rel))
    pthread_atfork(prepare, parent, child);
}

void set_fork_handlers(fork_stage stage, void (*prepare_handler)(), void (*parent_handler)(),
                       void (*child_handler)()) noexcept {
  const int i = static_cast<int>(stage);
  if (g_stages[i].ready.load(std::memory_order_acquire)) return;  // set already
  register_fork_stages();
  pthread_mutex_lock(&g_tables_lock);
  if (!g_stages[i].ready.load(std::memory_order_relaxed)) {
    g_stages[i].prepare = prepare_handler;
    g_stages[i].parent = parent_handler;
    g_stages[i].child = child_handler;
    g_stages[i].ready.store(true, std::memory_order_release);
  }
  pthread_mutex_unlock(&g_tables_lock);
}

bool add_allocator_fork_handlers(void (*prepare_handler)(), void (*parent_handler)(),
                                 void (*child_handler)()) noexcept {
  pthread_mutex_lock(&g_tables_lock);
  const int i = g_claimed.load(std::memory_order_relaxed);
  const bool added = i < kMaxForkAllocators;
  if (added) {
    g_allocators[i].prepare = prepare_handler;
    g_allocators[i].parent = parent_handler;
    g_allocators[i].child = child_handler;
    g_allocators[i].ready.store(true, std::memory_order_release);
    g_claimed.store(i + 1, std::memory_order_release);
  }
  pthread_mutex_unlock(&g_tables_lock);
  return added;
}

}  // namespace percpu::detail
