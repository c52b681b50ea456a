// The allocator's fork handlers, run last before fork() and first after it (see fork_order.h).
#include "percpu/fork_order.h"

#include <pthread.h>

#include <atomic>

namespace percpu::detail {
namespace {

std::atomic<void (*)()> g_prepare{nullptr}, g_parent{nullptr}, g_child{nullptr};

void run(const std::atomic<void (*)()>& handler) {
  if (auto* f = handler.load(std::memory_order_acquire)) f();
}

void prepare() {
  run(g_prepare);
}
void parent() {
  run(g_parent);
}
void child() {
  run(g_child);
}

// Priority 101: before libpercpu's other constructors (which register their own handlers), so
// that this prepare handler runs after theirs.
__attribute__((constructor(101))) void register_allocator_stage() {
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
