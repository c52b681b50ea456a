// percpu_rwsem's writer side and sleeping waits (percpu/percpu_rwsem.h says the protocol).
#include "percpu/percpu_rwsem.h"

#include <sched.h>

#include <climits>
#include <ctime>

#include "fork_order.h"
#include "fork_window.h"
#include "futex.h"
#include "intrusive_registry.h"
#include "reopen_window.h"

namespace percpu::detail {
namespace {

// A wait spins, then yields the CPU, then sleeps: a reader section or a writer's hand-over
// lasts microseconds, a futex sleep and wake-up tens of them; and where threads outnumber CPUs
// the thread waited for may be off its CPU, which a yield hands it (a sleep too, but dearer).
constexpr int kSpinRounds = 100;
constexpr int kYieldRounds = 50;

template <class Done>
bool spin_until(Done done) noexcept {
  for (int i = 0; i < kSpinRounds; ++i) {
    if (done()) return true;
    PERCPU_CPU_RELAX();
  }
  for (int i = 0; i < kYieldRounds; ++i) {
    if (done()) return true;
    sched_yield();
  }
  return done();
}

// Waits until done(): spins and yields, then sleeps on `word`, which changes (followed by
// wake()) whenever done() may have become true. `sleepers` counts the threads asleep on it.
template <class Done>
void wait_on(std::atomic<std::uint32_t>& word, std::atomic<std::uint32_t>& sleepers,
             Done done) noexcept {
  if (spin_until(done)) return;
  for (;;) {
    // Counted before the last look: a waker that changes the word after it sees the count.
    sleepers.fetch_add(1, std::memory_order_seq_cst);
    const std::uint32_t seen = word.load(std::memory_order_seq_cst);
    if (!done()) futex_wait(word, seen);
    sleepers.fetch_sub(1, std::memory_order_relaxed);
    if (done()) return;
  }
}

// After changing `word`: wakes the threads asleep on it, if any.
void wake(std::atomic<std::uint32_t>& word, std::atomic<std::uint32_t>& sleepers) noexcept {
  if (sleepers.load(std::memory_order_seq_cst) != 0) futex_wake(word);
}

// Every percpu_rwsem of the process, for the fork() child handler.
constinit intrusive_registry<rwsem_core> g_registry;
void lock_for_fork() {
  g_registry.lock();
}
void unlock_in_parent() {
  g_registry.unlock();
}
void unlock_in_child() {
  g_registry.for_each([](rwsem_core& r) { r.after_fork_in_child(); });
  g_registry.unlock();
}

__attribute__((constructor)) void register_fork_handlers() {
  set_fork_handlers(fork_stage::rwsems, lock_for_fork, unlock_in_parent, unlock_in_child);
}

}  // namespace

void rwsem_core::enroll() noexcept {
  g_registry.add(this);
}

void rwsem_core::withdraw() noexcept {
  g_registry.remove(this);
}

void rwsem_core::after_fork_in_child() noexcept {
  // Only the forking thread lives on: whoever waited in the parent (readers at the gate,
  // writers for their turn, sleepers) does not exist here. A write lock this thread holds
  // stays held and the turn stays its own; one another thread held or was taking stays closed
  // (it has no owner here, as with any lock); read locks other threads held stay counted.
  waiting_.store(0, std::memory_order_relaxed);
  gen_sleepers_.store(0, std::memory_order_relaxed);
  waiting_sleepers_.store(0, std::memory_order_relaxed);
  serving_sleepers_.store(0, std::memory_order_relaxed);
  drain_sleepers_.store(0, std::memory_order_relaxed);
  const std::uint32_t serving = serving_.load(std::memory_order_relaxed);
  if ((__atomic_load_n(&gate_, __ATOMIC_RELAXED) & kWriter) == 0) {
    next_ticket_.store(serving, std::memory_order_relaxed);
  } else if (pthread_equal(owner_, pthread_self())) {
    next_ticket_.store(serving + 1, std::memory_order_relaxed);
  }
}

std::intptr_t rwsem_core::readers() const noexcept {
  std::uintptr_t sum = 0;
  for (int i = 0; i < slots_.size(); ++i)
    sum += static_cast<std::uintptr_t>(__atomic_load_n(&slots_[i], __ATOMIC_RELAXED));
  // The shared count last: a reader's unlock (a slot) comes after its lock (here), so a sum
  // that has seen the unlock sees the lock too, and never counts a reader inside as gone.
  sum += static_cast<std::uintptr_t>(shared_.load(std::memory_order_seq_cst) & ~kSharedWriter);
  return static_cast<std::intptr_t>(sum);
}

bool rwsem_core::try_enter_shared() noexcept {
  // One compare-and-swap against the writer's fetch_or of kSharedWriter on the same word: a
  // reader counts itself only where no writer is, and never has to take it back (a fork in
  // between would leave the count raised in the child).
  std::intptr_t n = shared_.load(std::memory_order_relaxed);
  do {
    if ((n & kSharedWriter) != 0) return false;
  } while (!shared_.compare_exchange_weak(n, n + 1, std::memory_order_seq_cst,
                                          std::memory_order_relaxed));
  // The clock (tens of ns) is read at every kReopenCheck-th entry only.
  if (n % kReopenCheck == 0 && __atomic_load_n(&gate_, __ATOMIC_RELAXED) == kClosed &&
      now_ns() >= reopen_at_ns_.load(std::memory_order_relaxed)) {
    std::intptr_t closed = kClosed;
    __atomic_compare_exchange_n(&gate_, &closed, 0, false, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED);
  }
  return true;
}

void rwsem_core::unlock_check() noexcept {
  // The decrement before the gate's load: on the shared path a writer does not fence, so
  // without this a reader could read a gate from before the writer's fetch_or while the
  // writer reads the slot from before the decrement, and neither would tell the other.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if ((__atomic_load_n(&gate_, __ATOMIC_SEQ_CST) & kWriter) != 0) wake_writer();
}

void rwsem_core::reader_wait_begin() noexcept {
  waiting_.fetch_add(1, std::memory_order_seq_cst);
}

void rwsem_core::reader_wait() noexcept {
  // A writer leaving raises gen_ and wakes the readers asleep on it.
  wait_on(gen_, gen_sleepers_,
          [this] { return (__atomic_load_n(&gate_, __ATOMIC_SEQ_CST) & kWriter) == 0; });
}

void rwsem_core::reader_wait_end() noexcept {
  // The next writer waits for the last of these readers before it takes the lock.
  if (waiting_.fetch_sub(1, std::memory_order_seq_cst) == 1) wake(waiting_, waiting_sleepers_);
}

void rwsem_core::wake_writer() noexcept {
  drain_.fetch_add(1, std::memory_order_seq_cst);
  wake(drain_, drain_sleepers_);
}

std::intptr_t rwsem_core::close_gate() noexcept {
  // The gate and the shared count's bit change together, as far as a fork() can tell.
  const fork_window no_fork;
  const std::intptr_t before = __atomic_fetch_or(&gate_, kClosed | kWriter, __ATOMIC_SEQ_CST);
  shared_.fetch_or(kSharedWriter, std::memory_order_seq_cst);
  return before;
}

void rwsem_core::leave(bool reopen) noexcept {
  // A fork() copies the lock held or released, never half released (the gate open but the
  // next writer's turn not yet passed on).
  const fork_window no_fork;
  shared_.fetch_and(~kSharedWriter, std::memory_order_seq_cst);
  __atomic_fetch_and(&gate_, reopen ? 0 : ~kWriter, __ATOMIC_SEQ_CST);
  gen_.fetch_add(1, std::memory_order_seq_cst);
  wake(gen_, gen_sleepers_);
  next_writer();
}

void rwsem_core::next_writer() noexcept {
  serving_.fetch_add(1, std::memory_order_seq_cst);
  wake(serving_, serving_sleepers_);
}

std::error_code rwsem_core::lock_exclusive() noexcept {
  const std::uint32_t ticket = next_ticket_.fetch_add(1, std::memory_order_relaxed);
  wait_on(serving_, serving_sleepers_,
          [&] { return serving_.load(std::memory_order_acquire) == ticket; });
  // Readers that waited for the previous writer enter first.
  wait_on(waiting_, waiting_sleepers_,
          [&] { return waiting_.load(std::memory_order_seq_cst) == 0; });
  const std::intptr_t before = close_gate();
  if ((before & kClosed) == 0) {
    // The per-CPU path was open: fence, so every reader section either has its add in a slot
    // now or aborts and finds the gate closed.
    const std::int64_t start = now_ns();
    if (const std::error_code e = try_fence_all()) {
      leave(true);
      return e;
    }
    fence_ns_ = now_ns() - start;
    reopen_at_ns_.store(now_ns() + kReopenFactor * fence_ns_, std::memory_order_relaxed);
  }
  // No reader enters now, so the sum only falls: wait for zero. A reader leaving while kWriter
  // is set raises drain_ and wakes a sleeping writer.
  wait_on(drain_, drain_sleepers_, [this] { return readers() == 0; });
  std::atomic_thread_fence(std::memory_order_acquire);  // the readers' loads happen before
  owner_ = pthread_self();
  return {};
}

remote_result<bool> rwsem_core::try_lock_exclusive() noexcept {
  // Refused without changing anything when a reader is in, a reader waits to enter, or a
  // writer has the turn: the common refusals leave nothing for a fork() to copy half done.
  std::uint32_t free_ticket = serving_.load(std::memory_order_acquire);
  if (readers() != 0 || waiting_.load(std::memory_order_seq_cst) != 0 ||
      next_ticket_.load(std::memory_order_relaxed) != free_ticket)
    return {false, {}};
  // From the ticket to the end the lock's state is half changed: fork() waits.
  const fork_window no_fork;
  if (!next_ticket_.compare_exchange_strong(free_ticket, free_ticket + 1, std::memory_order_acquire,
                                            std::memory_order_relaxed))
    return {false, {}};
  if (waiting_.load(std::memory_order_seq_cst) != 0) {
    next_writer();
    return {false, {}};
  }
  const bool fenced = (close_gate() & kClosed) == 0;
  const std::error_code e = fenced ? try_fence_all() : std::error_code{};
  if (e || readers() != 0) {
    leave(fenced);
    return {false, e};
  }
  std::atomic_thread_fence(std::memory_order_acquire);
  owner_ = pthread_self();
  return {true, {}};
}

void rwsem_core::unlock_exclusive() noexcept {
  owner_ = pthread_t{};
  leave(false);
}

}  // namespace percpu::detail
