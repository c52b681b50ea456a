// Unloading code that ran per-CPU operations. A section leaves the thread's rseq_cs pointing at
// its descriptor when it ends (the kernel clears it lazily, at the thread's next preemption,
// signal or migration outside the section), and the descriptor lives in the code that inlined
// the operation. If that code is unmapped first (dlclose() of a plugin, freed JIT code), the
// kernel reads an unmapped descriptor at that thread's next preemption and kills the process
// with SIGSEGV. The rule is the kernel's and librseq's (rseq_prepare_unload()).
#pragma once

#include "percpu/config.h"  // first: the C++20 check

#include <cstdint>

#include "percpu/arch/area.h"
#include "percpu/runtime.h"

namespace percpu {

/// Disarms the calling thread's rseq area (rseq_cs = 0), so that no critical section's
/// descriptor is referenced by it any more.
///
/// Call it on each thread that ran a per-CPU operation inlined from a module, after that
/// thread's last such operation and before the module is unloaded (dlclose()) or its code
/// freed; one call per thread suffices, whatever the number of operations. Threads that have
/// exited need nothing. Not needed for code that stays mapped to the end of the process (the
/// program itself, libraries never unloaded, percpu malloc, which is linked `-z nodelete`).
/// Cheap (one store), async-signal-safe, a no-op before initialization or without an area.
/// Source: Linux include/uapi/linux/rseq.h (rseq_cs), librseq's rseq_prepare_unload().
inline void prepare_unload() noexcept {
  const std::intptr_t off = detail::g_hot.rseq_offset;
  if (off != 0) arch::clear_rseq_cs(off);
}

}  // namespace percpu
