// An intrusive per-CPU LIFO free list: the structure a slab allocator keeps per CPU. Push and pop
// are one critical section each on the calling thread's list; another index's list can be
// drained while its threads keep using it.
#pragma once

#define PERCPU_PUBLIC_HEADER 1  // lets it include percpu/internal/

#include "percpu/internal/config.h"  // first: the C++20 check

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <system_error>

#include "percpu/checked.h"
#include "percpu/current_ops.h"
#include "percpu/ops.h"
#include "percpu/remote.h"
#include "percpu/slot_array.h"
#include "percpu/tsan.h"

namespace percpu {

/// Per-CPU (or per-mm_cid, M) LIFO list of T, linked through the member `Link` (a T*) of each
/// item. The list never allocates and never touches an item it does not hold; items belong to
/// the caller, who must not free or reuse an item while it is in a list.
///
/// - push(), pop(), pop_all() act on the calling thread's current index, one critical section
///   each (about 1-2 ns in rseq mode), and are async-signal-safe.
/// - drain(index) empties any index's list, also while threads push and pop on it (a gate
///   word closes the list, then fence_index() waits out the sections that began before).
/// - In fallback mode the same operations run on the same lists with the same results.
/// - Checked (default: debug builds, see PERCPU_CHECKED) records which items are stored, so a
///   double push throws instead of linking an item into two places.
/// - Under ThreadSanitizer (tsan.h) an item's push happens before the pop, pop_all() or drain()
///   that takes it, keyed on the item's address: a thread may use an item it took without
///   further synchronization, as with a mutex-protected list.
///
/// Each index's list head sits on its own cache line; the lists are sized by the index space
/// of M (possible CPUs, or the mm_cid bound).
template <class T, T* T::*Link = &T::next, index_mode M = index_mode::cpu_id,
          bool Checked = kCheckedDefault>
class freelist {
 public:
  /// An empty list with slots of its own (one cache line per index).
  freelist() : slots_(index_space<M>()) {}

  /// An empty list whose per-index heads are one 16-byte object of `from` (which must outlive
  /// it). Throws as slot_array's pool constructor.
  explicit freelist(pool<M>& from) : slots_(index_space<M>(), from) {}

  /// Items still in the lists stay the caller's (the lists only forget them).
  ~freelist() {
    for (int i = 0; i < slots_.size(); ++i) forget(reinterpret_cast<T*>(slots_[i].head));
  }
  freelist(const freelist&) = delete;
  freelist& operator=(const freelist&) = delete;

  /// Pushes `item` onto the calling thread's list.
  /// Throws std::invalid_argument for a null item, and (Checked) std::logic_error when `item`
  /// is already stored in a percpu structure; in both cases nothing changes.
  PERCPU_ALWAYS_INLINE void push(T* item) {
    if (PERCPU_UNLIKELY(item == nullptr)) throw_null_item();
    if constexpr (Checked) {
      if (!detail::checked_insert(item)) throw_double_push();
    }
    detail::tsan_release(item);  // TSan: the item's writes so far happen before its pop
    const detail::current_result r = detail::current_compare_push<M>(
        slots_, link_offset(), reinterpret_cast<std::intptr_t>(item));
    if (PERCPU_LIKELY(r == detail::current_result::committed)) return;
    push_cold(item, detail::fast_status(r));
  }

  /// Pops the most recently pushed item of the calling thread's list; nullptr when it is empty.
  PERCPU_ALWAYS_INLINE T* pop() noexcept {
    std::intptr_t item;
    const detail::current_result r = detail::current_compare_pop<M>(slots_, link_offset(), item);
    if (PERCPU_LIKELY(r == detail::current_result::committed)) return popped(item);
    // An open, empty list is the common miss: the section answers it, as cheaply as a pop
    // that finds an item. A closed list goes to the slow path, which waits for the drain.
    if (r == detail::current_result::miss) return nullptr;
    return pop_cold(detail::fast_status(r));
  }

  /// Detaches the calling thread's whole list and returns its first item (follow Link to the
  /// rest; the last item's Link is nullptr), or nullptr when the list is empty.
  T* pop_all() noexcept {
    for (;;) {
      int at = 0;
      std::intptr_t head = 0;
      const status s = retry<M>([&](int index) {
        at = index;
        slot& sl = slots_[index];
        head = __atomic_load_n(&sl.head, __ATOMIC_RELAXED);
        if (head == 0) return status::compare_failed;
        return compare_compare_store<M>(&sl.head, head, &sl.gate, kOpen, 0, index);
      });
      if (s == status::committed) return taken(reinterpret_cast<T*>(head));
      if (!wait_if_closed(at) && head == 0) return nullptr;
    }
  }

  /// Detaches the whole list of `index` (any index, typically another CPU's), while threads may
  /// be pushing and popping on it, and returns its first item as pop_all() does, or the error
  /// remote_errc::no_fence when no fence is possible (try_fence_index()); nothing changes then.
  /// Pushes and pops on that index wait for the few microseconds it takes. Not
  /// async-signal-safe. Throws std::out_of_range for an index outside [0, slots()).
  remote_result<T*> try_drain(int index) {
    slot& sl = slots_.at(index);
    detail::remote_section remote;
    __atomic_store_n(&sl.gate, kClosed, __ATOMIC_SEQ_CST);
    // Reopens the list on every exit below: the fence's error, an exception, an unwind.
    detail::reopen_on_exit reopen(&sl.gate, kOpen);
    if (const std::error_code e = try_fence_index(M, index)) return {nullptr, e};
    // No section on this index can commit now. The striped fallback lock also orders us after
    // fallback-mode operations that checked the gate before it closed.
    std::intptr_t head;
    do {
      head = __atomic_load_n(&sl.head, __ATOMIC_ACQUIRE);
    } while (detail::fallback_compare_store(&sl.head, head, 0) != status::committed);
    return {taken(reinterpret_cast<T*>(head)), {}};
  }

  /// try_drain(), throwing std::system_error (remote_errc::no_fence) when no fence is possible.
  T* drain(int index) {
    const remote_result<T*> r = try_drain(index);
    if (r.error) throw std::system_error(r.error, "percpu::freelist::drain");
    return r.value;
  }

  /// Number of lists (the index space of M).
  int slots() const noexcept { return slots_.size(); }

  /// Counts the items of the list of `index` by walking it. Exact only while no thread uses the
  /// list (for tests and end-of-run checks); throws std::out_of_range for a bad index.
  std::size_t count_quiescent(int index) const {
    std::size_t n = 0;
    for (T* p = reinterpret_cast<T*>(slots_.at(index).head); p; p = p->*Link) ++n;
    return n;
  }

 private:
  // One attempt of push() and pop() on `index`, for the loops below (fallback mode included).
  PERCPU_ALWAYS_INLINE status push_attempt(T* item, int index) noexcept {
    slot& sl = slots_[index];
    // The section links the item to the head it reads itself (the item is still ours).
    return compare_push<M>(&sl.head, &sl.gate, kOpen, link_offset(),
                           reinterpret_cast<std::intptr_t>(item), index);
  }
  PERCPU_ALWAYS_INLINE status pop_attempt(std::intptr_t& item, int index) noexcept {
    slot& sl = slots_[index];
    return compare_pop<M>(&sl.head, 0, &sl.gate, kOpen, link_offset(), &item, index);
  }

  [[noreturn, gnu::noinline, gnu::cold]] static void throw_null_item() {
    throw std::invalid_argument("percpu::freelist::push: null item");
  }
  [[noreturn, gnu::noinline, gnu::cold]] static void throw_double_push() {
    throw std::logic_error("percpu::freelist::push: item is already in a list (double push)");
  }

  // push() and pop() after their one fast attempt did not commit (the head moved, the list is
  // empty or closed, an abort, fallback mode): the full loops.
  [[gnu::noinline, gnu::cold]] void push_cold(T* item, status fast) noexcept {
    detail::count_fast_attempt(fast);
    for (;;) {
      int at = 0;
      const status s = retry<M>([&](int index) {
        at = index;
        return push_attempt(item, index);
      });
      if (s == status::committed) return;
      wait_if_closed(at);  // the head moved under us, or a drain closed the list
    }
  }

  [[gnu::noinline, gnu::cold]] T* pop_cold(status fast) noexcept {
    detail::count_fast_attempt(fast);
    for (;;) {
      int at = 0;
      std::intptr_t item = 0;
      const status s = retry<M>([&](int index) {
        at = index;
        return pop_attempt(item, index);
      });
      if (s == status::committed) return popped(item);
      if (!wait_if_closed(at)) return nullptr;  // open and empty
    }
  }

  // A committed pop found a nonempty list (head != 0): telling the compiler spares the caller's
  // `if (item)` a test and a branch.
  static T* popped(std::intptr_t item) noexcept {
    if (item == 0) __builtin_unreachable();
    detail::tsan_acquire(reinterpret_cast<const void*>(item));
    if constexpr (Checked) detail::checked_erase(reinterpret_cast<T*>(item));
    return reinterpret_cast<T*>(item);
  }

  static constexpr std::intptr_t kOpen = 0;
  static constexpr std::intptr_t kClosed = 1;

  // The layout of the current-index list sections (internal/arch/x86_64/current_ops.h): head, then
  // gate, and an open gate is 0.
  struct slot {
    std::intptr_t head;  // first item, 0 when empty
    std::intptr_t gate;  // kOpen, or kClosed while drain() works on this list
  };
  static_assert(offsetof(slot, head) == 0 && offsetof(slot, gate) == 8 && kOpen == 0,
                "the layout of the current-index list sections");

  // Byte offset of Link inside T, for the pop section (computed without constructing a T).
  static std::ptrdiff_t link_offset() noexcept {
    alignas(T) static unsigned char probe[sizeof(T)];
    T* p = reinterpret_cast<T*>(probe);
    return reinterpret_cast<unsigned char*>(&(p->*Link)) - probe;
  }

  // After a failed attempt on `index`: waits while a drain holds it closed. Returns true when
  // the caller should try again because the list was (or just was) closed.
  bool wait_if_closed(int index) noexcept {
    bool waited = false;
    while (__atomic_load_n(&slots_[index].gate, __ATOMIC_ACQUIRE) != kOpen) {
      detail::wait_for_remote();
      waited = true;
    }
    return waited || __atomic_load_n(&slots_[index].head, __ATOMIC_RELAXED) != 0;
  }

  // Checked builds: the items of a detached chain are no longer stored.
  static T* forget(T* chain) noexcept {
    if constexpr (Checked) {
      for (T* p = chain; p; p = p->*Link) detail::checked_erase(p);
    }
    return chain;
  }

  // A chain detached by pop_all() or drain(): forgotten, and under TSan the caller now happens
  // after each item's push (acquired before its link is read).
  static T* taken(T* chain) noexcept {
    if constexpr (PERCPU_TSAN) {
      for (T* p = chain; p; p = p->*Link) detail::tsan_acquire(p);
    }
    return forget(chain);
  }

  slot_array<slot> slots_;
};

}  // namespace percpu
