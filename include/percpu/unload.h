// Unloading code that ran per-CPU operations. A section leaves the thread's rseq_cs pointing at
// its descriptor when it ends (the kernel clears it lazily, at the thread's next preemption,
// signal or migration outside the section), and the descriptor lives in the code that inlined
// the operation. If that code is unmapped first (dlclose() of a plugin, freed JIT code), the
// kernel reads an unmapped descriptor at that thread's next preemption and kills the process
// with SIGSEGV. The rule is the kernel's and librseq's (rseq_prepare_unload()).
//
// dlclose() is handled without any call: every object (program or shared library) that includes
// the section headers carries a hidden teardown (percpu/internal/unload_teardown.h) that runs when
// it is unloaded and clears the rseq_cs of every thread that still points at one of its
// descriptors. prepare_unload() below remains for what the teardown cannot see: code unmapped
// without dlclose() (JIT code, a hand-made mapping), threads not made by pthread_create() or whose
// robust list the program replaced, and programs that want the disarm explicit.
#pragma once

#define PERCPU_PUBLIC_HEADER 1  // lets it include percpu/internal/

#include "percpu/internal/config.h"  // first: the C++20 check

#include <cstdint>

#include "percpu/internal/arch.h"
#include "percpu/runtime.h"

namespace percpu {

/// Disarms the calling thread's rseq area (rseq_cs = 0), so that no critical section's
/// descriptor is referenced by it any more.
///
/// Needed only for code freed without dlclose() (JIT code; dlclose() runs the object's unload
/// teardown, which disarms every thread, unload_teardown.h) and for threads the teardown cannot
/// find (made by raw clone(), or whose robust list the program replaced). Call it on each thread
/// that ran a per-CPU operation inlined from such code, after that thread's last such operation
/// and before the code is freed; one call per thread suffices, whatever the number of
/// operations. Threads that have exited need nothing. Harmless before a dlclose() too. Not
/// needed for code that stays mapped to the end of the process (the program itself, libraries
/// never unloaded, libpercpu.so and percpu malloc, which are linked `-z nodelete`).
/// Cheap (one store), async-signal-safe, a no-op before initialization or without an area.
/// Source: Linux include/uapi/linux/rseq.h (rseq_cs), librseq's rseq_prepare_unload().
inline void prepare_unload() noexcept {
  const std::intptr_t off = detail::g_hot.rseq_offset;
  if (off != 0) arch::clear_rseq_cs(off);
}

}  // namespace percpu
