// Remote access to other indices' slots: the fence and the process-wide remote guard.
#include "percpu/remote.h"

#include <pthread.h>
#include <sched.h>

#include <cerrno>
#include <mutex>
#include <stdexcept>
#include <string>
#include <system_error>

#include "cancel_disabled.h"
#include "fallback_mode.h"
#include "fence.h"
#include "fork_order.h"
#include "percpu/runtime.h"
#include "percpu/slot_array.h"
#include "signals_blocked.h"

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
  detail::set_fork_handlers(detail::fork_stage::remote, lock_for_fork, unlock_after_fork,
                            unlock_after_fork);
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
  if (detail::fence_cpus(mode == index_mode::cpu_id ? index : -1, kObservationLimitMs).empty())
    return {};
  return make_error_code(remote_errc::no_fence);
}

void fence_index(index_mode mode, int index) {
  if (const std::error_code e = try_fence_index(mode, index))
    throw std::system_error(
        e, std::string("percpu::fence_index: ") + to_string(mode) + " " + std::to_string(index));
}

std::error_code try_fence_all() noexcept {
  detail::initialize();
  std::uint32_t mode = __atomic_load_n(&detail::g_hot.fallback, __ATOMIC_SEQ_CST);
  if (mode != detail::kFallbackMode) {
    detail::cancel_disabled no_cancel;
    try {
      if (!detail::fence_cpus(-1, kObservationLimitMs).empty())
        return make_error_code(remote_errc::no_fence);
    } catch (const std::bad_alloc&) {
      return std::make_error_code(std::errc::not_enough_memory);
    }
    mode = __atomic_load_n(&detail::g_hot.fallback, __ATOMIC_SEQ_CST);
  }
  // No fallback operation begins before the process leaves rseq mode, and the mode never
  // returns to it: still in rseq mode now, none is in flight.
  if (mode != detail::kRseqMode) detail::fallback_grace();
  return {};
}

namespace detail {

remote_section::remote_section() noexcept {
  block_all_signals(saved_);
  pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &cancel_state_);
  g_remote_mutex.lock();
}

remote_section::remote_section(std::try_to_lock_t) noexcept {
  block_all_signals(saved_);
  owns_ = g_remote_mutex.try_lock();
  if (owns_)
    pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &cancel_state_);
  else
    restore_signals(saved_);
}

remote_section::~remote_section() {
  if (!owns_) return;
  g_remote_mutex.unlock();
  pthread_setcancelstate(cancel_state_, nullptr);
  restore_signals(saved_);
}

void wait_for_remote() noexcept {
  sched_yield();
}

}  // namespace detail
}  // namespace percpu
