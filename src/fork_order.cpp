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
// Written under g_tables_lock (below), which fork's handlers hold too; `ready` lets
// set_fork_handlers() see a set stage without taking the lock (a pool's constructor).
struct handlers {
  void (*prepare)() = nullptr;
  void (*parent)() = nullptr;
  void (*child)() = nullptr;
  std::atomic<bool> ready{false};  // set once the three pointers above are written

  void set(void (*prepare_handler)(), void (*parent_handler)(), void (*child_handler)()) {
    prepare = prepare_handler;
    parent = parent_handler;
    child = child_handler;
    ready.store(true, std::memory_order_release);
  }
};

constexpr int kStages = static_cast<int>(fork_stage::runtime) + 1;
constinit handlers g_stages[kStages]{};

constinit handlers g_allocators[kMaxForkAllocators]{};
constinit int g_allocator_count = 0;  // under g_tables_lock

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
  for (int i = g_allocator_count - 1; i >= 0; --i) run(g_allocators[i].prepare);
  fallback_locks_before_fork();
}

void after(bool child) {
  fallback_locks_after_fork();
  for (int i = 0; i < g_allocator_count; ++i)
    run(child ? g_allocators[i].child : g_allocators[i].parent);
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
  if (!g_stages[i].ready.load(std::memory_order_relaxed))
    g_stages[i].set(prepare_handler, parent_handler, child_handler);
  pthread_mutex_unlock(&g_tables_lock);
}

bool add_allocator_fork_handlers(void (*prepare_handler)(), void (*parent_handler)(),
                                 void (*child_handler)()) noexcept {
  pthread_mutex_lock(&g_tables_lock);
  const bool added = g_allocator_count < kMaxForkAllocators;
  if (added) g_allocators[g_allocator_count++].set(prepare_handler, parent_handler, child_handler);
  pthread_mutex_unlock(&g_tables_lock);
  return added;
}

}  // namespace percpu::detail
