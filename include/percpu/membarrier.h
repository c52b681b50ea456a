// The membarrier RSEQ fence: abort the critical sections other threads of this process are
// running, so that a thread can safely act on another CPU's per-CPU data.
#pragma once

#define PERCPU_PUBLIC_HEADER 1  // lets it include percpu/internal/

#include "percpu/internal/config.h"

namespace percpu {

/// Aborts every rseq critical section that a thread of this process is running on `cpu` (or on
/// every CPU when `cpu` is -1) at the time of the call: when it returns, such a section has
/// either committed or will restart at its abort handler.
///
/// Uses membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED_RSEQ[, MEMBARRIER_CMD_FLAG_CPU, cpu])
/// (Linux 5.10), registering the process for it on first use. Returns 0 on success, or an errno
/// value (ENOSYS or EINVAL on kernels without it, EPERM under seccomp) when the fence is
/// unavailable; callers then need another method. Not async-signal-safe on first use.
PERCPU_API int membarrier_rseq_fence(int cpu = -1) noexcept;

/// True when membarrier_rseq_fence() works in this process (queried once, cached).
PERCPU_API bool membarrier_rseq_available() noexcept;

}  // namespace percpu
