// Disabling thread cancellation for a scope: how percpu keeps pthread_cancel() from stopping a
// thread inside a window that holds a lock or a closed slot, or inside a noexcept function
// (glibc cancels by unwinding, and an unwind that reaches a noexcept frame calls
// std::terminate). glibc does the same around its own locked regions that reach cancellation
// points (its malloc's statistics, its stdio).
#pragma once

#include <pthread.h>

namespace percpu::detail {

/// Sets the calling thread's cancelability state to PTHREAD_CANCEL_DISABLE from construction
/// to destruction, then restores the previous state. A cancellation request that arrives in
/// between stays pending and acts at the thread's next cancellation point after the scope, as
/// POSIX specifies. Nests. Costs two calls that touch only the thread's own descriptor (no
/// system call). Async-signal-safe in practice on glibc (an atomic update of the thread's
/// cancel word), though POSIX does not list it.
class cancel_disabled {
 public:
  cancel_disabled() noexcept { pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &saved_); }
  ~cancel_disabled() { pthread_setcancelstate(saved_, nullptr); }
  cancel_disabled(const cancel_disabled&) = delete;
  cancel_disabled& operator=(const cancel_disabled&) = delete;

 private:
  int saved_ = PTHREAD_CANCEL_ENABLE;
};

}  // namespace percpu::detail
