// The order of fork() handlers for an allocator built on percpu (percpu malloc).
//
// pthread_atfork() runs prepare handlers in the reverse order of their registration, and
// handlers of a library initialized earlier are registered earlier: libpercpu's own (the remote
// guard, the runtime's mutexes, pool locks) would run after those of an allocator that depends
// on libpercpu. But threads call malloc while holding those locks (a pool drain, a switch to
// fallback mode, a thread's first dense id): a fork() that took the allocator's locks first
// would then wait for such a thread while it waits for the allocator. So the allocator's locks
// must be taken last and released first, as glibc does for its own malloc.
#pragma once

#include "percpu/config.h"

namespace percpu::detail {

/// Installs the allocator's fork handlers. libpercpu calls `prepare` after every fork handler
/// registered with pthread_atfork() since libpercpu was loaded (from a handler it registers
/// before any other of its own, in a constructor of priority 101), and `parent` or `child`
/// before them. One allocator per process: a later call replaces the handlers. Call it from a
/// constructor, before any thread may fork.
PERCPU_API void set_allocator_fork_handlers(void (*prepare)(), void (*parent)(),
                                            void (*child)()) noexcept;

}  // namespace percpu::detail
