// The automatic half of unloading (see percpu/unload.h): every object (executable or shared
// library) that includes the section headers gets one teardown, run when the object is unloaded
// (dlclose()), that disarms every thread whose rseq_cs still points at one of the
// object's descriptors. Nothing runs on the sections' paths: the teardown finds the object's
// descriptors by the linker's __start___rseq_cs/__stop___rseq_cs symbols (the descriptors are
// emitted into section __rseq_cs, PERCPU_RSEQ_DESCRIPTOR in arch/rseq_tables.h), which each
// object defines for its own section.
//
// Both the symbols and the teardown object are hidden, so that each object keeps its own: a
// default-visibility inline variable would be unified across objects by the dynamic linker, and
// the plugin's teardown would then be the program's. One teardown per object, not per
// translation unit: an inline variable is constructed (and its teardown registered with the
// object's __dso_handle) once, where a destructor function in a header would be listed in
// .fini_array by every translation unit. At exit the teardowns do nothing
// (register_unload_teardown()).
#pragma once

#include "percpu/config.h"  // first: the C++20 check

#include <cstdint>

// Defined by the linker for the object being linked when it has a __rseq_cs section; weak, so
// that an object without sections links (both are then null).
extern "C" {
extern const char __start___rseq_cs[] __attribute__((weak, visibility("hidden")));
extern const char __stop___rseq_cs[] __attribute__((weak, visibility("hidden")));
}
// The object's own handle for __cxa_atexit() (crtbegin.o defines one in every object). C++
// linkage, as the compiler declares it itself for the destructors it registers (an unmangled
// name either way).
extern void* __dso_handle __attribute__((visibility("hidden")));

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

/// Registers `teardown` to run when the object `dso` (its __dso_handle) is unloaded, through
/// __cxa_atexit(), and right after it an exit marker with libpercpu's own handle. Handlers run
/// in the reverse order of their registration, and dlclose() runs only the unloaded object's:
/// so at dlclose() the teardown runs and disarms, while at exit() the marker runs first and
/// the teardown then does nothing (other threads may still be inside the object's sections at
/// exit, and a section whose rseq_cs was cleared would no longer abort). Each registration
/// holds a few dozen bytes of the C library's until exit, so a plugin opened and closed N times
/// holds N markers. Called once per object at its load, from its teardown's constructor.
PERCPU_API void register_unload_teardown(void (*teardown)(void*), void* dso) noexcept;

/// The object's teardown: disarm_range() on its own __rseq_cs range (hidden and inline: each
/// object has its own copy, which reads its own linker symbols).
__attribute__((visibility("hidden"))) inline void run_unload_teardown(void*) noexcept {
  const auto lo = reinterpret_cast<std::uintptr_t>(__start___rseq_cs);
  const auto hi = reinterpret_cast<std::uintptr_t>(__stop___rseq_cs);
  if (lo != 0 && lo < hi) disarm_range(lo, hi);
}

/// Registers the object's teardown once per object, when the object is initialized.
struct unload_teardown {
  unload_teardown() noexcept { register_unload_teardown(run_unload_teardown, &__dso_handle); }
};

// Objects never unloaded before exit (libpercpu.so and libpercpu_malloc.so, both linked
// `-z nodelete`) build without it: at exit other threads may still be inside their sections,
// and a section whose rseq_cs was cleared would no longer abort.
#if !defined(PERCPU_NO_UNLOAD_TEARDOWN)
__attribute__((visibility("hidden"))) inline unload_teardown g_unload_teardown;
#endif

}  // namespace percpu::detail
