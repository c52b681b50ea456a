#include "percpu/membarrier.h"

#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>

namespace percpu {
namespace {

long sys_membarrier(int cmd, unsigned flags, int cpu) {
  return syscall(SYS_membarrier, cmd, flags, cpu);
}

// 0: not yet registered, 1: registered, -errno: unavailable.
std::atomic<int> g_registration{0};

int register_once() {
  int state = g_registration.load(std::memory_order_acquire);
  if (state != 0) return state;
  const long r = sys_membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_RSEQ, 0, 0);
  state = r == 0 ? 1 : -errno;
  g_registration.store(state, std::memory_order_release);
  return state;
}

}  // namespace

int membarrier_rseq_fence(int cpu) noexcept {
  const int state = register_once();
  if (state < 0) return -state;
  const unsigned flags = cpu >= 0 ? MEMBARRIER_CMD_FLAG_CPU : 0;
  long r = sys_membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED_RSEQ, flags, cpu < 0 ? 0 : cpu);
  if (r != 0 && errno == EPERM) {
    // A forked child does not inherit the registration: register again and retry once.
    if (sys_membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_RSEQ, 0, 0) == 0)
      r = sys_membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED_RSEQ, flags, cpu < 0 ? 0 : cpu);
  }
  return r == 0 ? 0 : errno;
}

bool membarrier_rseq_available() noexcept {
  return register_once() > 0;
}

}  // namespace percpu
