// percpu malloc's allocation functions (see allocator.h): size class lookup, the per-CPU cache
// fast paths, batch refills and flushes, the free tag that catches double frees, large
// mappings, and the fatal fault reports.
#include "malloc/allocator.h"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "fork_order.h"
#include "malloc/central.h"
#include "malloc/cpu_cache.h"
#include "malloc/fast_path.h"
#include "malloc/free_tag.h"
#include "malloc/introspection.h"
#include "malloc/maintenance.h"
#include "malloc/page_heap.h"
#include "malloc/reentrancy.h"
#include "malloc/stats.h"
#include "signals_blocked.h"

namespace percpu::malloc_impl {
namespace {

// Depth of allocator calls on this thread. The per-CPU caches are used only at depth 0: the
// first use of the percpu runtime on a thread may allocate, and those nested allocations go to
// the central lists instead of recursing into the runtime.
__attribute__((tls_model("initial-exec"))) thread_local int t_depth = 0;

class nested {
 public:
  nested() noexcept { ++t_depth; }
  ~nested() { --t_depth; }
  nested(const nested&) = delete;
  nested& operator=(const nested&) = delete;
};

}  // namespace

[[noreturn]] __attribute__((noinline, cold)) void slow::fatal(const char* what,
                                                              const void* p) noexcept {
  char line[512];
  std::size_t n = 0;
  // The message may take all but the room the pointer's part needs: " (0x" 16 digits ")\n".
  constexpr std::size_t kTail = 4 + 16 + 2;
  auto put_upto = [&](const char* s, std::size_t end) {
    while (*s != '\0' && n < end) line[n++] = *s++;
  };
  auto put = [&](const char* s) { put_upto(s, sizeof line); };
  put("percpu malloc: ");
  put_upto(what, sizeof line - kTail);
  put(" (0x");
  char hex[17];
  auto v = reinterpret_cast<std::uintptr_t>(p);
  int k = 16;
  hex[k] = '\0';
  do {
    hex[--k] = "0123456789abcdef"[v & 15];
    v >>= 4;
  } while (v != 0 && k > 0);
  put(hex + k);
  put(")\n");
  if (write(STDERR_FILENO, line, n) < 0) {
  }
  std::abort();
}

void slow::free_fault(const char* what, const void* p) noexcept {
  fatal(what, p);
}

void* slow::pop_fault(const void* p) noexcept {
  fatal(
      "malloc(): double free, or a pointer that is not allocated was freed (a cached object "
      "without its free tag)",
      p);
}

namespace {
using slow::fatal;

// Frees a signal handler could not finish because it interrupted a locked region of this
// thread: kept here (an object the allocator still counts as live and tagged as cached) until
// this thread's next slow path, which completes them. Beyond kDeferred the object is leaked and
// counted (statistics), never corrupted.
//
// Signal safety: only handlers add (a handler runs to its end before the code it interrupted
// resumes, but a handler for another signal may interrupt it), and the thread's own slow paths
// take entries off. A plain `count++` or `--count` is a load, an add and a store on arm64 (one
// instruction on x86-64): a handler running between the load and the store would have its
// entry overwritten or taken twice. Both sides therefore work with signals blocked (two system
// calls, on a path taken only when a handler frees inside a locked region).
constexpr int kDeferred = 64;
__attribute__((tls_model("initial-exec"))) thread_local void* t_deferred[kDeferred];
__attribute__((tls_model("initial-exec"))) thread_local int t_deferred_count = 0;

void defer_free(void* p) noexcept {
  percpu::detail::signals_blocked guard;
  if (t_deferred_count < kDeferred) {
    t_deferred[t_deferred_count++] = p;
  } else {
    count_leaked_free();
  }
}

// Takes the newest deferred free off this thread's list; nullptr when it is empty.
void* take_deferred() noexcept {
  percpu::detail::signals_blocked guard;
  return t_deferred_count > 0 ? t_deferred[--t_deferred_count] : nullptr;
}

void finish_free(void* p) noexcept;

// Completes the deferred frees (called at the start of the slow paths, outside any lock). Rare:
// the list fills only while signal handlers free inside the allocator's locked regions.
void free_deferred() noexcept {
  while (PERCPU_UNLIKELY(__atomic_load_n(&t_deferred_count, __ATOMIC_RELAXED) != 0)) {
    void* p = take_deferred();
    if (p == nullptr) break;  // a handler completed them meanwhile
    finish_free(p);
  }
}

// A batch from the central lists: one object for the caller, the rest onto this index's stack.
void* refill(std::size_t cls) noexcept {
  maybe_maintain();
  // An empty stack: counted on its index (the statistics' refills), and let it hold more, budget
  // permitting.
  bool counted;
  cache_note_miss(cls, &counted);
  if (!counted) count_refill_outside(cls);
  void* batch[kMaxBatch];
  const std::size_t n = central_remove(cls, batch, kClasses[cls].batch);
  if (n == 0) return nullptr;
  // The batch's objects were mostly freed on other CPUs (a transfer-cache batch): their lines
  // are fetched now, all at once, for the pops that check and clear their tags (free_tag.h),
  // instead of one stall at each pop.
  for (std::size_t i = 1; i < n; ++i) __builtin_prefetch(static_cast<char*>(batch[i]) + 8, 1);
  const std::size_t pushed = cache_push_many(cls, batch + 1, n - 1);
  if (1 + pushed < n) central_insert(cls, batch + 1 + pushed, n - 1 - pushed);
  return batch[0];
}

// The slow path of a small allocation: the per-CPU cache through the generic operations (they
// register this thread's area, wait out remote drains, retry aborts), a refill, or the central
// lists. Out of line, so the fast path needs no stack frame.
}  // namespace

__attribute__((noinline)) void* slow::allocate_small(std::size_t cls, bool fast_aborted) noexcept {
  if (PERCPU_UNLIKELY(fast_aborted)) percpu::detail::note_abort();  // statistics
  void* p = nullptr;
  if (PERCPU_UNLIKELY(t_locks != 0)) {
    // A signal handler interrupted this thread inside a locked region: no lock may be taken.
    if (cache_init()) p = cache_pop(cls);
    if (p == nullptr) {
      errno = ENOMEM;
      return nullptr;
    }
    if (!take_for_user(p)) slow::pop_fault(p);
    return p;
  }
  free_deferred();
  if (t_depth == 0) {
    nested guard;
    if (cache_init()) {
      p = cache_pop(cls);
      if (p == nullptr) p = refill(cls);
    }
  }
  if (p == nullptr && central_remove(cls, &p, 1) == 0) {
    errno = ENOMEM;
    return nullptr;
  }
  if (!take_for_user(p)) slow::pop_fault(p);  // checked, and the user's now
  return p;
}

// Returns a freed object: onto this index's stack, growing its capacity or flushing a batch to
// the central lists when it is at capacity. The slow path of free (out of line, as allocate_small).
__attribute__((noinline)) void slow::give_back(std::size_t cls, void* p,
                                               bool fast_aborted) noexcept {
  if (PERCPU_UNLIKELY(fast_aborted)) percpu::detail::note_abort();  // statistics
  if (PERCPU_UNLIKELY(t_locks != 0)) {
    // A signal handler inside a locked region (see allocate_small).
    if (!cache_init() || !cache_push(cls, p)) defer_free(p);
    return;
  }
  free_deferred();
  if (t_depth == 0) {
    nested guard;
    if (cache_init()) {
      if (cache_push(cls, p)) return;
      // At capacity: grow it (budget permitting) or lower it (cache_note_overflow), and make
      // room: a batch to the central lists, two when the capacity fell.
      const overflow_action a = cache_note_overflow(cls);
      if (a == overflow_action::grew && cache_push(cls, p)) return;
      count_flush(cls);
      maybe_maintain();
      for (int k = a == overflow_action::lowered ? 2 : 1; k > 0; --k) {
        void* batch[kMaxBatch];
        const std::size_t n = cache_pop_many(cls, batch, kClasses[cls].batch);
        if (n != 0) central_insert(cls, batch, n);
      }
      if (cache_push(cls, p)) return;
    }
  }
  central_insert(cls, &p, 1);
}

__attribute__((noinline)) void slow::give_back_freed(void* p, bool fast_aborted) noexcept {
  give_back(pagemap::entry::size_class(page_heap().entry_of(p)), p, fast_aborted);
}

namespace {

// Completes a deferred free: a small object, checked and tagged already, goes to the caches;
// a large one goes back to the page heap (checked there).
void finish_free(void* p) noexcept {
  span* s = page_heap().span_of(p);
  if (s != nullptr && s->kind == span::state::small)
    return slow::give_back(s->size_class, p, false);
  if (!page_heap().free_large(p)) fatal("free(): invalid pointer or double free", p);
}

// A large allocation (above the size classes): a span of the page heap. `zeroed`, when given,
// is set to whether its memory already reads as zero.
void* allocate_large(std::size_t size, std::size_t alignment, bool* zeroed = nullptr) noexcept {
  if (PERCPU_UNLIKELY(t_locks != 0)) {  // a handler inside a locked region: no lock
    errno = ENOMEM;
    return nullptr;
  }
  maybe_maintain();
  bool fresh = false;
  span* s = page_heap().allocate_large(size, alignment, fresh);
  if (s == nullptr) {
    errno = ENOMEM;
    return nullptr;
  }
  if (zeroed != nullptr) *zeroed = fresh;
  return s->start() + s->offset;
}

// realloc() of a large allocation to a size that is large too: in place when the page heap can
// (shrinking, or growing into the free span after it); otherwise moved, and when it grows, to
// at least twice its size, so that a buffer grown by small steps is copied O(log n) times, not
// once per step (the pages beyond what it writes stay untouched, costing no memory).
void* reallocate_large(void* p, std::size_t size, std::size_t old) noexcept {
  // A handler inside a locked region takes no lock: allocate_large() below refuses too, so the
  // call fails with ENOMEM and `p` stays as it was.
  if (PERCPU_LIKELY(t_locks == 0) && page_heap().resize_large(p, size)) return p;
  constexpr std::size_t kMaxDoubling = std::size_t{1} << 40;
  void* q = nullptr;
  if (size > old && old <= kMaxDoubling && 2 * old > size) q = allocate_large(2 * old, kPageSize);
  if (q == nullptr) q = allocate_large(size, kPageSize);
  if (q == nullptr) return nullptr;  // p stays valid, as realloc() promises
  std::memcpy(q, p, size < old ? size : old);
  if (!page_heap().free_large(p)) fatal("realloc(): invalid pointer or double free", p);
  return q;
}

// fork(): every lock of percpu malloc is held across it, so a child never inherits one held by
// a thread that does not exist there. One fixed order, the order in which the code nests them:
// the statistics printer's, the introspection's (mallinfo2, malloc_info, malloc_stats), the
// maintenance pass's, each central list's, the page heap's. They are taken after every other
// fork handler's locks (fork_order.h): threads call malloc while holding those. The per-CPU
// caches need nothing: a section interrupted by fork() never committed.
void lock_for_fork() noexcept {
  ++t_locks;  // a handler running on this thread during fork() must not wait for these
  stats_lock_for_fork();
  figures_lock_for_fork();
  maintenance_lock_for_fork();
  central_lock_all();
  page_heap().lock();
}

void unlock_after_fork(bool child) noexcept {
  page_heap().unlock();
  central_unlock_all();
  if (child)
    maintenance_unlock_in_child();
  else
    maintenance_unlock_after_fork();
  figures_unlock_after_fork();
  stats_unlock_after_fork();
  --t_locks;
}
void unlock_in_parent() noexcept {
  unlock_after_fork(false);
}
void unlock_in_child() noexcept {
  unlock_after_fork(true);
}

// Stops the process with `fault` unless `p` is an object a user holds: the start of a small one
// without a free tag (held_by_user), or the start of a large one.
void check_allocated(const void* p, const char* fault) noexcept {
  const span* s = page_heap().span_of(p);
  if (s == nullptr || s->kind == span::state::free) fatal(fault, p);
  if (s->kind == span::state::large) {
    if (s->start() + s->offset != p) fatal(fault, p);
    return;
  }
  const auto offset = static_cast<std::uint64_t>(static_cast<const char*>(p) - s->start());
  if (!is_object_start(s->size_class, offset) || !held_by_user(p)) fatal(fault, p);
}

// The next allocator's functions, for pointers outside percpu malloc's memory (allocator.h).
std::atomic<void (*)(void*)> g_foreign_free{nullptr};
std::atomic<void* (*)(void*, std::size_t)> g_foreign_realloc{nullptr};
std::atomic<std::size_t (*)(void*)> g_foreign_usable_size{nullptr};

}  // namespace

__attribute__((noinline)) void slow::deallocate_other(void* p, span* s) noexcept {
  if (p == nullptr) return;  // free(NULL): its entry reads as class 0 (fast_path.h)
  if (s == nullptr) {
    if (auto next = g_foreign_free.load(std::memory_order_acquire)) return next(p);
    fatal("free(): invalid pointer (not from percpu malloc)", p);
  }
  if (s->kind == span::state::free)
    fatal("free(): invalid pointer (in percpu malloc's free memory: already freed?)", p);
  if (PERCPU_UNLIKELY(t_locks != 0)) return defer_free(p);  // a handler: see give_back
  if (!page_heap().free_large(p))
    fatal("free(): invalid pointer, inside a block, or double free", p);
  maybe_maintain();  // a slow path too
}

void* slow::allocate_large_block(std::size_t size) noexcept {
  return allocate_large(size, kPageSize);
}

namespace {

__attribute__((constructor)) void register_fork_handlers() {
  if (!percpu::detail::add_allocator_fork_handlers(lock_for_fork, unlock_in_parent,
                                                   unlock_in_child))
    pthread_atfork(lock_for_fork, unlock_in_parent, unlock_in_child);
}

}  // namespace

void* allocate(std::size_t size) noexcept {
  return allocate_inline(size);
}

void deallocate(void* p) noexcept {
  deallocate_inline(p);
}

void* allocate_zeroed(std::size_t count, std::size_t size) noexcept {
  std::size_t bytes;
  if (__builtin_mul_overflow(count, size, &bytes)) {
    errno = ENOMEM;
    return nullptr;
  }
  if (size_class_of(bytes) == 0) {
    // A large span reads as zero when its pages were never touched or returned to the kernel
    // since; a reused one is cleared.
    bool zeroed = false;
    void* p = allocate_large(bytes, kPageSize, &zeroed);
    if (p != nullptr && !zeroed) std::memset(p, 0, bytes);
    return p;
  }
  void* p = allocate(bytes);
  if (p != nullptr) std::memset(p, 0, bytes);
  return p;
}

void* reallocate(void* p, std::size_t size) noexcept {
  if (p == nullptr) return allocate(size);
  if (size == 0) {
    deallocate(p);
    return nullptr;
  }
  const span* s = page_heap().span_of(p);
  if (s == nullptr) {
    if (auto next = g_foreign_realloc.load(std::memory_order_acquire)) return next(p, size);
  }
  check_allocated(p,
                  "realloc(): invalid pointer, or one already freed (inside an object, past its "
                  "span's last one, or not allocated)");
  const std::size_t old =
      s->kind == span::state::large ? s->bytes() - s->offset : kClasses[s->size_class].size;
  if (size_class_of(size) == 0 && s->kind == span::state::large)
    return reallocate_large(p, size, old);
  if (size <= old && size >= old / 2) return p;
  void* q = allocate(size);
  if (q == nullptr) return nullptr;
  std::memcpy(q, p, size < old ? size : old);
  deallocate(p);
  return q;
}

void* allocate_aligned(std::size_t alignment, std::size_t size) noexcept {
  if (alignment == 0) alignment = kAlignment;  // glibc 2.36: memalign(0, n) is malloc(n)
  if (size == 0) size = 1;                     // a unique pointer, as malloc(0) gives
  if ((alignment & (alignment - 1)) != 0) {
    errno = EINVAL;
    return nullptr;
  }
  if (alignment <= kAlignment) return allocate(size);
  if (alignment <= kPageSize) {
    // Spans start on a page, so every object of a class whose size is a multiple of the
    // alignment is aligned.
    for (std::size_t cls = size_class_of(size < alignment ? alignment : size);
         cls != 0 && cls < kClassCount; ++cls)
      if (kClasses[cls].size % alignment == 0) return allocate_inline(kClasses[cls].size);
  }
  return allocate_large(size, alignment);
}

std::size_t usable_size(const void* p) noexcept {
  if (p == nullptr) return 0;
  const span* s = page_heap().span_of(p);
  if (s == nullptr) {
    if (auto next = g_foreign_usable_size.load(std::memory_order_acquire))
      return next(const_cast<void*>(p));
  }
  if (s == nullptr || s->kind == span::state::free)
    fatal("malloc_usable_size(): invalid pointer (not from percpu malloc, or freed)", p);
  if (s->kind == span::state::large) return s->bytes() - s->offset;
  // A small object must be one a user holds, as for realloc: an interior pointer, the span's
  // tail or a freed object stops the process rather than report a size.
  check_allocated(p, "malloc_usable_size(): invalid pointer, inside an object, or not allocated");
  return kClasses[s->size_class].size;
}

void set_foreign_allocator(const foreign_allocator& next) noexcept {
  g_foreign_usable_size.store(next.usable_size, std::memory_order_relaxed);
  g_foreign_realloc.store(next.realloc, std::memory_order_relaxed);
  g_foreign_free.store(next.free, std::memory_order_release);
}

}  // namespace percpu::malloc_impl
