// Remote access to other indices' slots: the fence and the process-wide remote guard.
#include "percpu/remote.h"

#include <pthread.h>
#include <sched.h>

#include <cerrno>
#include <mutex>
#include <stdexcept>
#include <string>
#include <system_error>

#include "percpu/membarrier.h"
#include "percpu/runtime.h"
#include "percpu/slot_array.h"

namespace percpu {
namespace {

std::mutex g_remote_mutex;

void lock_for_fork() {
  g_remote_mutex.lock();
}
void unlock_after_fork() {
  g_remote_mutex.unlock();
}

// Registered when the library loads, not on first use: a registration racing with a fork in
// another thread could miss that fork, whose child would then inherit a held mutex.
__attribute__((constructor)) void register_fork_handlers() {
  pthread_atfork(lock_for_fork, unlock_after_fork, unlock_after_fork);
}

// Runs the calling thread on `cpu` once (it preempts whatever ran there), then restores its
// affinity. Returns false when the thread may not run there.
bool run_once_on(int cpu) {
  cpu_set_t saved;
  if (sched_getaffinity(0, sizeof(saved), &saved) != 0 || cpu >= CPU_SETSIZE) return false;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  const bool moved = sched_setaffinity(0, sizeof(one), &one) == 0;
  if (moved) sched_yield();
  sched_setaffinity(0, sizeof(saved), &saved);
  return moved;
}

}  // namespace

void fence_index(index_mode mode, int index) {
  const int space = mode == index_mode::cpu_id ? index_space<index_mode::cpu_id>()
                                               : index_space<index_mode::mm_cid>();
  if (index < 0 || index >= space)
    throw std::out_of_range("percpu::fence_index: index " + std::to_string(index) +
                            " outside [0, " + std::to_string(space) + ")");
  // Skip only once fallback mode is complete. While a switch is in progress, sections that
  // passed their mode check may still commit: they must be fenced like any other.
  detail::initialize();
  if (__atomic_load_n(&detail::g_hot.fallback, __ATOMIC_ACQUIRE) == detail::kFallbackMode) return;
  // mm_cid mode is served by cpu_id where the kernel lacks mm_cid; a full fence covers both.
  const bool one_cpu = mode == index_mode::cpu_id;
  if (membarrier_rseq_fence(one_cpu ? index : -1) == 0) return;
  if (!one_cpu) {
    detail::migration_sweep();
    return;
  }
  if (!run_once_on(index))
    throw std::system_error(EINVAL, std::generic_category(),
                            "percpu::fence_index: membarrier RSEQ is unavailable and this thread "
                            "may not run on CPU " +
                                std::to_string(index));
}

namespace detail {

remote_section::remote_section() noexcept {
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &saved_);
  g_remote_mutex.lock();
}

remote_section::remote_section(std::try_to_lock_t) noexcept {
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &saved_);
  owns_ = g_remote_mutex.try_lock();
  if (!owns_) pthread_sigmask(SIG_SETMASK, &saved_, nullptr);
}

remote_section::~remote_section() {
  if (!owns_) return;
  g_remote_mutex.unlock();
  pthread_sigmask(SIG_SETMASK, &saved_, nullptr);
}

void wait_for_remote() noexcept {
  sched_yield();
}

}  // namespace detail
}  // namespace percpu
