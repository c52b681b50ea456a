// percpu's fork() handlers, in one place: every lock the library and an allocator built on it
// hold is taken before fork() in one fixed order and released after it, by the one handler
// this registry installs with pthread_atfork().
//
// The order: fork windows (first: fork() waits until no thread is inside a multi-step change of
// a percpu_rwsem, percpu_ref or histogram snapshot, which may take the locks after it in a
// fence), the histograms (each one flipped, one fence, and a wait until no record is half done
// in an old bank: before any lock a signal handler that interrupted a record may wait for, such
// as a counter's fold lock in sum()), the percpu_rwsem registry, the percpu_counter registry
// (each counter's fold lock), pools, the remote guard, the checked table, the runtime (switch, info
// and dense-id mutexes), then allocators built on percpu (percpu malloc), then fallback mode's
// stripes. Threads call malloc while holding the library's own locks (a pool drain, a switch to
// fallback mode, a thread's first dense id): a fork() that took the allocator's locks first would
// wait for such a thread while it waits for the allocator. So the allocator's locks are taken after
// them and released first, as glibc does for its own malloc. Fallback mode's stripes come after the
// allocator's locks: a signal handler that interrupts the allocator's locked code may use a stripe
// (percpu malloc's caches in fallback mode) before the region ends. Signals stay blocked on the
// forking thread from the first prepare until after fork, so a handler there never waits for a lock
// its own thread took for the fork.
//
// pthread_atfork() runs prepare handlers in the reverse order of their registration. The
// registry's handler is registered when libpercpu loads (a constructor of priority 101, or
// initialize() if that runs first), before any handler a program registers later: so a
// program's own prepare handlers run first, and may still use percpu (a pool, malloc) before
// percpu's locks are taken.
#pragma once

#include "percpu/internal/config.h"

namespace percpu::detail {

/// The library's own fork stages, in the order their prepare handlers run (their parent and
/// child handlers run in the reverse order, after the allocators' and the stripes').
enum class fork_stage { windows, histograms, rwsems, counters, pools, remote, checked, runtime };

/// Sets the handlers of `stage`; the first call for a stage counts, later ones are ignored. Any
/// of the three may be null. Safe to call from any thread at any time: a call made while
/// another thread forks waits until that fork's handlers have all run (so a fork runs either
/// all three of a stage's handlers or none), and a fork() that starts before the handlers are
/// set runs none of them (whatever they would lock did not exist yet). Not from a fork handler.
void set_fork_handlers(fork_stage stage, void (*prepare)(), void (*parent)(),
                       void (*child)()) noexcept;

/// Registers the registry's handler with pthread_atfork() unless it is registered already.
/// libpercpu calls it from a constructor of priority 101 and from initialize(), whichever runs
/// first (a malloc call from the C library's start-up under percpu malloc's preload).
void register_fork_stages() noexcept;

/// Adds an allocator's fork handlers. Its `prepare` runs (the latest added first) after the
/// library's own stages and just before fallback mode's stripes are taken; its `parent` or
/// `child` handler runs (the first added first) just after the stripes are released, before
/// the library's own. A process may hold more than one allocator (libpercpu_malloc.so preloaded
/// into a program that links percpu malloc's internals too), each with its own locks. Returns
/// false, adding nothing, when kMaxForkAllocators are installed already; the caller then
/// registers with pthread_atfork() itself. Call it from a constructor, before any thread may
/// fork.
inline constexpr int kMaxForkAllocators = 8;
PERCPU_API bool add_allocator_fork_handlers(void (*prepare)(), void (*parent)(),
                                            void (*child)()) noexcept;

/// Fallback mode's stripes (fallback.cpp): the last stage takes every stripe before fork and
/// releases them after it, in the parent and in the child.
void fallback_locks_before_fork() noexcept;
void fallback_locks_after_fork() noexcept;

}  // namespace percpu::detail
