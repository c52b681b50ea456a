// The automatic half of unloading (see percpu/unload.h): every object (executable or shared
// library) that includes the section headers gets one teardown, run when the object is unloaded
// (dlclose()), that disarms every thread whose rseq_cs still points at one of the
// object's descriptors. Nothing runs on the sections' paths: the teardown finds the object's
// descriptors by the linker's __start___rseq_cs/__stop___rseq_cs symbols (the descriptors are
// emitted into section __rseq_cs, PERCPU_RSEQ_DESCRIPTOR in internal/rseq_tables.h), which each
// object defines for its own section.
//
// Both the symbols and the teardown are hidden, so that each object keeps its own: a
// default-visibility inline function would be unified across objects by the dynamic linker,
// and the plugin's teardown would then be the program's. Each translation unit lists the
// teardown in the object's .fini_array; a flag of the object's own makes the first run the only
// one.
//
// At exit nothing is done: objects still loaded then are not unmapped, and other threads may
// still be inside their sections, which would no longer abort with rseq_cs cleared. libpercpu
// tells the two apart with an exit handler registered when it loads: exit() runs it after every
// handler registered later (the program's static destructors, atexit() handlers, so a
// dlclose() from one of those still disarms) and before _dl_fini(), which runs the .fini_array
// of the objects still loaded.
#pragma once

#if !defined(PERCPU_PUBLIC_HEADER) && !defined(PERCPU_BUILDING)
#error "<percpu/internal/unload_teardown.h> is internal: include <percpu/percpu.h>"
#endif

#include "percpu/internal/config.h"  // first: the C++20 check

#include <cstdint>

// Defined by the linker for the object being linked when it has a __rseq_cs section; weak, so
// that an object without sections links (both are then null).
extern "C" {
extern const char __start___rseq_cs[] __attribute__((weak, visibility("hidden")));
extern const char __stop___rseq_cs[] __attribute__((weak, visibility("hidden")));
}

namespace percpu::detail {

/// Disarms every live thread of the process whose area's rseq_cs holds an address in
/// [lo, hi) (sets it to 0), the calling thread's included.
///
/// For code about to be unmapped: [lo, hi) is the descriptor range of an object being unloaded,
/// and no thread may run its code any more (so none is inside one of its sections). Other
/// threads are found through /proc/self/task and each thread's robust-list head, which glibc
/// registers inside the thread's descriptor at a fixed distance from its thread pointer; each
/// candidate area is read with process_vm_readv() (no fault on a bad address) and must look like
/// a registered area before it is touched. Each clear is a compare-and-swap, safe against the
/// owner (which stores only whole new descriptor addresses) and the kernel (which stores only
/// 0). Does nothing before initialization, for ranges inside the main program (unloaded only at
/// exit, when other threads may still be inside its sections), or when the process has no
/// registered area. Thread-safe; async-signal-safe (system calls only, no lock, no allocation).
/// Threads not created by pthread_create() (raw clone()) and threads whose robust list was
/// replaced by the program are skipped: they need prepare_unload(). Source: Linux
/// include/uapi/linux/rseq.h (rseq_cs), get_robust_list(2), process_vm_readv(2).
PERCPU_API void disarm_range(std::uintptr_t lo, std::uintptr_t hi) noexcept;

#if !defined(PERCPU_NO_UNLOAD_TEARDOWN)
/// Set once the object's teardown ran (it is listed once per translation unit).
__attribute__((visibility("hidden"))) inline bool g_unload_teardown_done = false;

/// The object's teardown, in its .fini_array: run by dlclose() before the object is unmapped,
/// and at exit by the C library's last exit step (_dl_fini), when disarm_range() does nothing.
/// Calls disarm_range() on the object's own __rseq_cs range. Hidden and inline: each object has
/// its own copy, which reads its own linker symbols. Objects never unloaded before exit
/// (libpercpu.so and libpercpu_malloc.so, both linked `-z nodelete`) build without it.
__attribute__((visibility("hidden"), destructor)) inline void run_unload_teardown() noexcept {
  if (g_unload_teardown_done) return;
  g_unload_teardown_done = true;
  const auto lo = reinterpret_cast<std::uintptr_t>(__start___rseq_cs);
  const auto hi = reinterpret_cast<std::uintptr_t>(__stop___rseq_cs);
  if (lo != 0 && lo < hi) disarm_range(lo, hi);
}
#endif

}  // namespace percpu::detail
