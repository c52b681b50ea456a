// Remote access to other indices' slots: the fence and the process-wide remote guard.
#include "percpu/remote.h"

#include <pthread.h>
#include <sched.h>

#include <cerrno>
#include <mutex>
#include <stdexcept>
#include <string>
#include <system_error>

#include "percpu/cancel_disabled.h"
#include "percpu/membarrier.h"
#include "percpu/runtime.h"
#include "percpu/slot_array.h"
#include "percpu/thread_observation.h"

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

class remote_category_impl : public std::error_category {
 public:
  const char* name() const noexcept override { return "percpu remote"; }
  std::string message(int value) const override {
    if (value == static_cast<int>(remote_errc::no_fence))
      return "no fence is possible: membarrier's RSEQ fence is unavailable, this thread may not "
             "run on the CPU, and a thread of the process kept running there";
    return "unknown percpu remote error " + std::to_string(value);
  }
};

// How long a fence by observation waits for a thread seen on an unreachable CPU to leave it.
constexpr int kObservationLimitMs = 50;

}  // namespace

const std::error_category& remote_category() noexcept {
  static const remote_category_impl category;
  return category;
}

std::error_code try_fence_index(index_mode mode, int index) {
  const int space = mode == index_mode::cpu_id ? index_space<index_mode::cpu_id>()
                                               : index_space<index_mode::mm_cid>();
  if (index < 0 || index >= space)
    throw std::out_of_range("percpu::fence_index: index " + std::to_string(index) +
                            " outside [0, " + std::to_string(space) + ")");
  // Skip only once fallback mode is complete. While a switch is in progress, sections that
  // passed their section-bound check may still commit: they must be fenced like any other.
  detail::initialize();
  if (__atomic_load_n(&detail::g_hot.fallback, __ATOMIC_ACQUIRE) == detail::kFallbackMode)
    return {};
  // Not cancellable: the sweep below changes this thread's affinity and puts it back, and the
  // observation opens and reads /proc (cancellation points).
  detail::cancel_disabled no_cancel;
  // mm_cid mode is served by cpu_id where the kernel lacks mm_cid; a full fence covers both.
  const bool one_cpu = mode == index_mode::cpu_id;
  if (membarrier_rseq_fence(one_cpu ? index : -1) == 0) return {};
  // Without membarrier: run on the CPU (every CPU for mm_cid, whose holder may run anywhere).
  // Where the kernel refuses (the CPU is offline, or outside this thread's cpuset), look at
  // the threads instead: an offline CPU runs none, and a cpuset that holds every thread keeps
  // them all off the CPU, so that proof comes at once.
  const std::vector<int> missed =
      detail::migration_sweep(one_cpu ? std::vector<int>{index} : detail::every_cpu_id());
  if (missed.empty() || detail::no_thread_runs_on(missed, kObservationLimitMs)) return {};
  return make_error_code(remote_errc::no_fence);
}

void fence_index(index_mode mode, int index) {
  if (const std::error_code e = try_fence_index(mode, index))
    throw std::system_error(
        e, std::string("percpu::fence_index: ") + to_string(mode) + " " + std::to_string(index));
}

namespace detail {

remote_section::remote_section() noexcept {
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &saved_);
  pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &cancel_state_);
  g_remote_mutex.lock();
}

remote_section::remote_section(std::try_to_lock_t) noexcept {
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &saved_);
  owns_ = g_remote_mutex.try_lock();
  if (owns_)
    pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &cancel_state_);
  else
    pthread_sigmask(SIG_SETMASK, &saved_, nullptr);
}

remote_section::~remote_section() {
  if (!owns_) return;
  g_remote_mutex.unlock();
  pthread_setcancelstate(cancel_state_, nullptr);
  pthread_sigmask(SIG_SETMASK, &saved_, nullptr);
}

void wait_for_remote() noexcept {
  sched_yield();
}

}  // namespace detail
}  // namespace percpu
