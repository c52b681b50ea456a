// The last stage of percpu's fork() handlers: an allocator built on percpu (percpu malloc), then
// fallback mode's stripes.
//
// pthread_atfork() runs prepare handlers in the reverse order of their registration, and
// handlers of a library initialized earlier are registered earlier: libpercpu's own (the remote
// guard, the runtime's mutexes, pool locks) would run after those of an allocator that depends
// on libpercpu. But threads call malloc while holding those locks (a pool drain, a switch to
// fallback mode, a thread's first dense id): a fork() that took the allocator's locks first
// would wait for such a thread while it waits for the allocator. So the allocator's locks are
// taken after them and released first, as glibc does for its own malloc. Fallback mode's
// stripes come after the allocator's locks: a signal handler that interrupts the allocator's
// locked code may use a stripe (percpu malloc's caches in fallback mode) before the region
// ends. Signals stay blocked on the forking thread from this stage's prepare until after fork,
// so a handler there never waits for a lock its own thread took for the fork.
#pragma once

#include "percpu/config.h"

namespace percpu::detail {

/// Registers the last stage with pthread_atfork() unless it is registered already. libpercpu
/// calls it from a constructor of priority 101 and from initialize() before that registers the
/// runtime's own fork handlers, whichever runs first: a handler registered before the last
/// stage runs its prepare after it, and would then wait, holding fallback mode's stripes, for a
/// thread that waits for a stripe (a thread holding the runtime's lock and calling malloc).
PERCPU_API void register_fork_stages() noexcept;

/// Adds an allocator's fork handlers. libpercpu runs every added `prepare` (the latest added
/// first) after every fork handler registered with pthread_atfork() since libpercpu was loaded
/// (from a handler it registers before any other of its own, in a constructor of priority 101)
/// and just before taking fallback mode's stripes; the `parent` or `child` handlers run (the
/// first added first) just after the stripes are released, before the other handlers. A process
/// may hold more than one allocator (libpercpu_malloc.so preloaded into a program that links
/// percpu malloc's internals too), each with its own locks. Returns false, adding nothing, when
/// kMaxForkAllocators are installed already; the caller then registers with pthread_atfork()
/// itself. Call it from a constructor, before any thread may fork.
inline constexpr int kMaxForkAllocators = 8;
PERCPU_API bool add_allocator_fork_handlers(void (*prepare)(), void (*parent)(),
                                            void (*child)()) noexcept;

}  // namespace percpu::detail
