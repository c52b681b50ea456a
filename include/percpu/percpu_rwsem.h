// percpu_rwsem: a reader-writer lock whose readers touch only their own CPU's slot, as the
// kernel's percpu_rw_semaphore (kernel/locking/percpu-rwsem.c): a read lock is one critical
// section that adds 1 to the calling CPU's reader count while no writer has closed the gate; a
// writer closes the gate, fences every CPU and waits until the counts sum to zero.
#pragma once

#define PERCPU_PUBLIC_HEADER 1  // lets it include percpu/internal/

#include "percpu/internal/config.h"  // first: the C++20 check

#include <pthread.h>

#include <atomic>
#include <cstdint>
#include <system_error>

#include "percpu/current_ops.h"
#include "percpu/ops.h"
#include "percpu/pool.h"
#include "percpu/remote.h"
#include "percpu/slot_array.h"
#include "percpu/tsan.h"

namespace percpu {

namespace detail {

/// The part of percpu_rwsem that does not depend on the index mode: its words, and the writer
/// side, the readers' shared path and the sleeping waits, compiled in the library
/// (percpu_rwsem.cpp).
class rwsem_core {
 public:
  rwsem_core(const rwsem_core&) = delete;
  rwsem_core& operator=(const rwsem_core&) = delete;

  /// The write lock's three forms (percpu_rwsem::lock_or_error(), try_lock_or_error(),
  /// unlock()).
  PERCPU_API std::error_code lock_exclusive() noexcept;
  PERCPU_API remote_result<bool> try_lock_exclusive() noexcept;
  PERCPU_API void unlock_exclusive() noexcept;

  /// Read locks held: the slots' sum plus the shared count (exact only while the gate is
  /// closed and fenced; a hint otherwise).
  PERCPU_API std::intptr_t readers() const noexcept;

  /// Bits of gate_. kClosed: the per-CPU path is closed (a writer fenced it; readers take the
  /// shared count until it reopens). kWriter: a writer holds the lock or waits for the readers.
  static constexpr std::intptr_t kClosed = 1;
  static constexpr std::intptr_t kWriter = 2;
  /// The bit of shared_ a writer sets as it sets kWriter: shared-path readers count themselves
  /// with a compare-and-swap only while it is clear.
  static constexpr std::intptr_t kSharedWriter = std::intptr_t{1} << 62;

  /// The fork() child handler's repair (percpu_rwsem.cpp).
  void after_fork_in_child() noexcept;

 protected:
  explicit rwsem_core(int slots) : slots_(slots) { enroll(); }
  rwsem_core(int slots, pool_base& from) : slots_(slots, from) { enroll(); }
  ~rwsem_core() { withdraw(); }

  /// Enters and leaves the registry the fork() child handler walks.
  PERCPU_API void enroll() noexcept;
  PERCPU_API void withdraw() noexcept;
  /// unlock_shared() found the gate closed: orders its decrement before a second look at the
  /// gate, and wakes a writer that waits for the readers.
  PERCPU_API void unlock_check() noexcept;

  /// A read lock through the shared count, for when the per-CPU path is closed: true when
  /// taken, false when a writer holds or waits for the lock. Reopens the per-CPU path once no
  /// writer has fenced for a while.
  PERCPU_API bool try_enter_shared() noexcept;
  /// A reader that found a writer: counted among the waiting readers from begin to end, so the
  /// next writer lets it in before it takes the lock.
  PERCPU_API void reader_wait_begin() noexcept;
  /// Waits (spin, yield, then sleep) until no writer holds or waits for the lock.
  PERCPU_API void reader_wait() noexcept;
  PERCPU_API void reader_wait_end() noexcept;
  /// unlock_shared() found a writer: tells it, if it sleeps waiting for the readers to leave.
  PERCPU_API void wake_writer() noexcept;
  /// A writer whose turn came closes the gate: sets kClosed and kWriter, and the shared
  /// count's kSharedWriter, in one fork window; returns the gate before.
  std::intptr_t close_gate() noexcept;
  /// Ends a writer's hold of the gate (its lock, or an attempt that failed): clears kWriter,
  /// and kClosed too when `reopen` (the attempt that closed it gives up), wakes the readers
  /// that wait for it, and passes the turn to the next ticket, all in one fork window.
  void leave(bool reopen) noexcept;
  /// Passes the writers' turn to the next ticket.
  void next_writer() noexcept;

  slot_array<std::intptr_t> slots_;  // per-CPU path: lock adds 1, unlock subtracts 1
  // Read by every reader's section, written by writers: a line of its own.
  alignas(64) std::intptr_t gate_ = 0;
  // The shared path's count (lock adds 1 here; unlock subtracts 1 from a slot): its own line,
  // which only readers that found the per-CPU path closed write.
  alignas(64) std::atomic<std::intptr_t> shared_{0};
  // Futex words, each with the count of threads asleep on it (a waker calls futex(2) only
  // when there is one).
  alignas(64) std::atomic<std::uint32_t> gen_{0};  // +1 whenever a writer leaves
  std::atomic<std::uint32_t> gen_sleepers_{0};
  std::atomic<std::uint32_t> waiting_{0};  // readers between wait_begin and wait_end
  std::atomic<std::uint32_t> waiting_sleepers_{0};
  std::atomic<std::uint32_t> next_ticket_{0};  // writers: FIFO tickets
  std::atomic<std::uint32_t> serving_{0};
  std::atomic<std::uint32_t> serving_sleepers_{0};
  std::atomic<std::uint32_t> drain_{0};  // +1 at each reader leaving while kWriter
  std::atomic<std::uint32_t> drain_sleepers_{0};
  std::atomic<std::int64_t> reopen_at_ns_{0};  // CLOCK_MONOTONIC: the per-CPU path may reopen
  std::int64_t fence_ns_ = 0;                  // the last fence's cost (writers only)
  pthread_t owner_{};                          // the write lock's holder (for fork())

 public:  // the registry's links (percpu_rwsem.cpp), under its mutex
  rwsem_core* prev_ = nullptr;
  rwsem_core* next_ = nullptr;
};

}  // namespace detail

/// A reader-writer lock for read-mostly data: readers scale with the CPUs because each read
/// lock and unlock is one rseq critical section on the calling thread's own slot (index mode M:
/// cpu_id or mm_cid), with no atomic instruction and no shared cache line written; a writer
/// pays a fence of every CPU (one membarrier system call; see "Frequent writers" for when it
/// need not) plus the wait for the readers inside. Meets
/// the standard's SharedMutex requirements (lock/try_lock/unlock, lock_shared/try_lock_shared/
/// unlock_shared), so std::shared_lock, std::unique_lock and std::scoped_lock work.
///
/// Follows the kernel's percpu_rw_semaphore: a reader adds 1 to its slot in a section that first
/// checks the gate word; a writer closes the gate, fences (try_fence_all(): every section in
/// flight has then committed its add or will abort and see the gate), and waits until the slots
/// sum to zero. A read unlock may run on another CPU than its lock: slots go negative, only the
/// sum counts. After the fence no slot grows, so a sum read slot by slot that comes to zero
/// proves that no reader is inside.
///
/// Frequent writers (BRAVO's reader bias, Dice and Kogan 2019, as the kernel's rcu_sync keeps
/// readers on the slow path until writers stop): after a writer has fenced, the per-CPU path
/// stays closed and readers take one shared count (an atomic add, as pthread_rwlock_t's) while
/// writers need no fence; a reader reopens the per-CPU path once ten times the last fence's
/// cost has passed since a writer fenced. So writers pay at most one fence per such window,
/// and read-only phases run on the per-CPU path. The unlock is the per-CPU decrement either way.
///
/// Fairness: writers are preferred while they hold or wait for the lock (readers arriving at a
/// closed gate wait), so a stream of readers cannot starve a writer; a writer waits only for the
/// readers already in. When a writer leaves, the readers that waited for it enter before the next
/// writer closes the gate (it waits until they are in), so a stream of writers cannot starve the
/// readers. Writers take the lock in arrival order (tickets). Waits spin briefly, yield the CPU
/// a few times (a thread waited for may be off its CPU), then sleep on a futex.
///
/// Cost (x86-64, rseq mode; percpu bench readmostly): lock_shared() + unlock_shared() are two
/// sections and a load of the gate, about two percpu::counter adds, at any number of threads. A
/// writer that finds the per-CPU path open fences every CPU (try_fence_all(): one membarrier
/// system call, hundreds of ns with the other CPUs idle, microseconds when it must interrupt
/// CPUs running readers) and then waits for the readers inside; later writers, while the path
/// stays closed, pay one atomic instead. With more threads than CPUs and frequent writers, a
/// writer also waits for readers preempted inside, and readers behind it wait too: a
/// reader-preferring lock (pthread_rwlock_t's default) keeps more throughput there, at the
/// cost of writers that may wait indefinitely.
///
/// Memory order: lock_shared() is an acquire of everything the last writer did before unlock();
/// unlock_shared() a release to the next writer's lock(); lock() an acquire of the previous
/// writer's unlock(). Fallback mode (no rseq) gives the same semantics through the fallback
/// operations; the fence then waits out fallback operations in flight.
///
/// Thread and signal safety: every member may be called from any thread. The read side makes no
/// allocation and takes no lock, so try_lock_shared() and unlock_shared() are async-signal-safe;
/// lock_shared() in a handler deadlocks if the interrupted thread holds or waits for the write
/// lock, as with any lock. Not recursive: a thread that holds a read lock and takes another while
/// a writer waits deadlocks (as the kernel's). No wait is a cancellation point, so a cancelled
/// thread never leaves the lock half taken; a lock held by a thread that is cancelled stays
/// held, as with pthread_rwlock_t. fork(): a handler repairs every lock in the child, where only
/// the forking thread lives on: readers and writers that waited in the parent are gone from it,
/// try_lock() and try_lock_shared() calls in progress leave nothing behind (fork() waits for a
/// try_lock() past its ticket, for an unlock() and for a writer closing the gate, so none is
/// copied half done), and a write lock the forking thread holds stays its own to
/// unlock; a lock another thread held (read or write), or was taking past its fence, stays
/// held, as with any lock. Destroying a lock that is held is undefined, as for
/// std::shared_mutex.
template <index_mode M = index_mode::cpu_id>
class percpu_rwsem : private detail::rwsem_core {
 public:
  /// An unlocked lock with slots of its own (one cache line per index of M). Throws
  /// std::bad_alloc without address space.
  percpu_rwsem() : rwsem_core(index_space<M>()) {}

  /// An unlocked lock whose reader counts are one 8-byte object of `from` (which must outlive
  /// it). Throws as slot_array's pool constructor.
  explicit percpu_rwsem(pool<M>& from) : rwsem_core(index_space<M>(), from) {}

  /// Takes a read lock, waiting while a writer holds the lock or waits for it.
  PERCPU_ALWAYS_INLINE void lock_shared() noexcept {
    const detail::current_result r = detail::current_gated_add<M>(slots_, &gate_, 1);
    if (PERCPU_LIKELY(r == detail::current_result::committed)) {
      entered();
      return;
    }
    lock_shared_cold(r);
  }

  /// Takes a read lock if no writer holds or waits for the lock; never blocks. Returns whether
  /// it took it.
  PERCPU_ALWAYS_INLINE bool try_lock_shared() noexcept {
    const detail::current_result r = detail::current_gated_add<M>(slots_, &gate_, 1);
    if (PERCPU_LIKELY(r == detail::current_result::committed)) {
      entered();
      return true;
    }
    return try_enter_cold(r);  // a writer, the shared path, or a section that did not run
  }

  /// Releases a read lock (taken by this thread or handed over to it). Precondition: one is held.
  PERCPU_ALWAYS_INLINE void unlock_shared() noexcept {
    detail::tsan_release(&slots_);
    // The read side's loads complete before the count drops (a no-op on x86-64).
    std::atomic_thread_fence(std::memory_order_release);
    const detail::current_result r = detail::current_add<M>(slots_, -1);
    if (PERCPU_UNLIKELY(r != detail::current_result::committed)) unlock_shared_cold(r);
    if (PERCPU_UNLIKELY(__atomic_load_n(&gate_, __ATOMIC_RELAXED) != 0)) unlock_check();
  }

  /// Takes the write lock, waiting for earlier writers and for the readers inside. Throws
  /// std::system_error with remote_errc::no_fence when no fence is possible (no membarrier and
  /// a CPU it may not run on kept running a thread of the process: see try_fence_all()); the
  /// lock is then as it was.
  void lock() {
    if (const std::error_code e = lock_or_error()) throw std::system_error(e, "percpu_rwsem::lock");
  }

  /// lock(), returning remote_errc::no_fence instead of throwing; empty when it took the lock.
  std::error_code lock_or_error() noexcept {
    const std::error_code e = lock_exclusive();
    if (!e) writer_entered();
    return e;
  }

  /// Takes the write lock if no other writer holds or waits for it and no reader is inside;
  /// never blocks (a fence is a system call, not a wait). False also when no fence is possible.
  bool try_lock() noexcept { return try_lock_or_error().value; }

  /// try_lock(), telling a refusal (value false, no error) from a fence that was not possible
  /// (error remote_errc::no_fence). Nothing changes unless value is true.
  remote_result<bool> try_lock_or_error() noexcept {
    const remote_result<bool> r = try_lock_exclusive();
    if (r.value) writer_entered();
    return r;
  }

  /// Releases the write lock. Precondition: the calling thread holds it.
  void unlock() noexcept {
    detail::tsan_release(&gate_);
    unlock_exclusive();
  }

  /// Number of read locks held (a sum of the slots read one by one: exact only while no
  /// thread locks or unlocks).
  std::intptr_t readers() const noexcept { return rwsem_core::readers(); }

  /// True while readers take the per-CPU path (no writer has closed it, or it has reopened
  /// since); false while they take the shared count. A hint for tests and diagnostics.
  bool readers_per_cpu() const noexcept { return __atomic_load_n(&gate_, __ATOMIC_RELAXED) == 0; }

  /// Number of slots (the index space of M).
  int slots() const noexcept { return slots_.size(); }

 private:
  PERCPU_ALWAYS_INLINE void entered() noexcept {
    // The gate's load inside the section orders what the reader reads after it.
    std::atomic_thread_fence(std::memory_order_acquire);
    detail::tsan_acquire(&gate_);
  }
  void writer_entered() noexcept {
    detail::tsan_acquire(&gate_);
    detail::tsan_acquire(&slots_);
  }

  // A read lock through the full loop on the current index while the per-CPU path is open
  // (fallback mode included), else through the shared count: true when taken, false when a
  // writer holds or waits for the lock.
  bool try_enter() noexcept {
    while (__atomic_load_n(&gate_, __ATOMIC_SEQ_CST) == 0) {
      const status s = retry<M>([this](int index) {
        std::intptr_t* slot = &slots_[index];
        const std::intptr_t n = __atomic_load_n(slot, __ATOMIC_RELAXED);
        return compare_compare_store<M>(slot, n, &gate_, 0, n + 1, index);
      });
      if (s == status::committed) {
        entered();
        return true;
      }
      // compare_failed: the gate closed, or the slot changed after it was read.
    }
    if (!try_enter_shared()) return false;
    entered();
    return true;
  }

  [[gnu::noinline, gnu::cold]] bool try_enter_cold(detail::current_result fast) noexcept {
    detail::count_fast_attempt(detail::fast_status(fast));
    return try_enter();
  }

  [[gnu::noinline, gnu::cold]] void lock_shared_cold(detail::current_result fast) noexcept {
    detail::count_fast_attempt(detail::fast_status(fast));
    if (try_enter()) return;
    reader_wait_begin();
    while (!try_enter()) reader_wait();
    reader_wait_end();
  }

  [[gnu::noinline, gnu::cold]] void unlock_shared_cold(detail::current_result fast) noexcept {
    detail::count_fast_attempt(detail::fast_status(fast));
    retry<M>([this](int index) { return percpu::add<M>(&slots_[index], -1, index); });
  }
};

}  // namespace percpu
