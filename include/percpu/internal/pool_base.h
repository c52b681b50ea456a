// The untyped per-CPU memory pool: objects with one slot per index (possible CPU or mm_cid
// value) at base + index * stride, in chunks reserved with mmap and populated only where
// touched, so a slot that no thread uses costs no resident memory. pool.h has the typed handles.
//
// Small objects (up to kCachedMaxBytes) are allocated and freed through per-CPU caches: two
// per-index stacks per size class, pushed and popped with critical sections. The clean stack
// holds zeroed objects ready to hand out; the dirty stack holds freed objects. Zeroing a freed
// object must not populate the slots nobody touched, and only mincore(2) tells which slots those
// are, so dirty objects are cleared in batches (one mincore per chunk per batch) when a cache
// runs dry or full. The shared central lists, the chunks and the clearing sit behind a mutex.
#pragma once

#if !defined(PERCPU_PUBLIC_HEADER) && !defined(PERCPU_BUILDING)
#error "<percpu/internal/pool_base.h> is internal: include <percpu/percpu.h>"
#endif

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "percpu/buffer.h"
#include "percpu/cpu.h"
#include "percpu/internal/config.h"
#include "percpu/remote.h"
#include "percpu/slot_array.h"

namespace percpu {

/// How a pool lays out its memory.
struct pool_options {
  /// Bytes between an object's consecutive slots, and so the bytes of objects one chunk holds
  /// for each index. A multiple of the page size (4096 on x86-64), at most 1 GiB; objects are at
  /// most this big.
  std::size_t stride = 64 * 1024;
  /// Number of slots; 0 means the index space of the pool's mode. Set it to model a larger
  /// machine (256 possible CPUs, say): slots no thread uses cost address space, not memory.
  /// Never fewer than the index space (every index must have a slot).
  int slots = 0;
  /// Debug mode: freed objects are poisoned (0xA5 in every written slot) and checked when
  /// handed out again, so that a write after free is reported; the per-CPU caches are bypassed,
  /// so allocation and free take a mutex and a system call (microseconds). Off by default: turn
  /// it on in tests and debugging sessions. Bad frees are reported in either mode.
  bool debug = false;
};

/// What a pool holds, measured when asked.
struct pool_stats {
  /// Address space reserved for objects (chunks, with the alignment gaps between them).
  std::size_t reserved_bytes = 0;
  /// Of the chunks' bytes, those resident now: mincore(2), in whole pages.
  std::size_t resident_bytes = 0;
  /// Resident bytes of the pool's bookkeeping (one byte per 8 bytes of slot-0 space, and the
  /// per-CPU caches), also from mincore(2).
  std::size_t metadata_bytes = 0;
  /// Objects allocated and not yet freed.
  std::size_t live_objects = 0;
  /// Freed objects waiting in the per-CPU caches and central lists for reuse.
  std::size_t free_objects = 0;
};

/// The untyped pool behind pool<M>, also usable directly (slot_array and region_array take
/// their slots from one). Thread-safe and fork-safe (a child can allocate and free, also when
/// another thread was allocating at fork()). allocate_bytes() and free_bytes() of small objects are
/// one or two critical sections on the calling thread's index in the common case.
class pool_base {
 public:
  /// Objects are rounded up to and aligned on this many bytes.
  static constexpr std::size_t kGranule = 8;
  /// Objects up to this size go through the per-CPU caches (size classes of kGranule bytes).
  static constexpr std::size_t kCachedMaxBytes = 256;
  static constexpr int kCachedClasses = static_cast<int>(kCachedMaxBytes / kGranule);
  /// Entries of each per-index stack (clean and dirty) of each cached size class.
  static constexpr std::size_t kCacheDepth = 255;

  /// A pool whose caches are indexed by `mode`, with `slots` slots per object (at least the
  /// index space of `mode`). Throws std::invalid_argument for a stride that is not a positive
  /// multiple of the page size, too few slots, or slots x stride beyond the address space.
  PERCPU_API pool_base(index_mode mode, int slots, const pool_options& options);
  PERCPU_API ~pool_base();
  pool_base(const pool_base&) = delete;
  pool_base& operator=(const pool_base&) = delete;

  /// Allocates an object of `size` bytes (rounded up to 8 up to 256 bytes, to one of four sizes
  /// per doubling above; alignment 8) and returns the address of its slot 0. Every slot reads as
  /// zero, or as the `size` bytes at `init` when given (copying an init value touches the object's
  /// page in every slot). Throws std::invalid_argument for size 0 or above the stride,
  /// std::bad_alloc without address space, and (debug mode) std::logic_error when the object chosen
  /// was written after it was freed (it is then withdrawn from use, and the allocation fails).
  void* allocate_bytes(std::size_t size, const void* init = nullptr) {
    if (size - 1 < kCachedMaxBytes && init == nullptr && !debug_) {
      const std::size_t cls = (size - 1) / kGranule;
      std::intptr_t p = 0;
      if (cache_pop(cls, kClean, p)) {
        // Popped objects are ours alone: a plain store marks them live.
        __atomic_store_n(code_of(reinterpret_cast<const char*>(p)), code_for(cls),
                         __ATOMIC_RELAXED);
        return reinterpret_cast<void*>(p);
      }
    }
    return allocate_slow(size, init);
  }

  /// Returns the object whose slot 0 is `p` (allocated with `size`) to the pool; later
  /// allocations reuse it, zeroed. Throws std::invalid_argument for a pointer that is not in
  /// this pool (null included), and std::logic_error for a double free, a pointer that is not
  /// the start of a live object, or a size that rounds to another size than the allocation's
  /// (sizes are rounded to 8 bytes up to 256, to four sizes per doubling above); nothing
  /// changes then. A free racing with another free of the same object is reported in one of
  /// the two.
  ///
  /// Zeroing a freed object writes only slots whose page is resident (mincore(2)), so untouched
  /// slots stay unpopulated; on a machine with swap configured it writes every slot that is not
  /// already zero (a swapped-out page still holds data).
  void free_bytes(void* ptr, std::size_t size) {
    if (size - 1 < kCachedMaxBytes && !debug_) {
      const std::size_t cls = (size - 1) / kGranule;
      unsigned char* code = code_of(static_cast<const char*>(ptr));
      unsigned char expected = code_for(cls);
      // One compare-and-swap marks it free: of two racing frees only one succeeds.
      if (code != nullptr && __atomic_compare_exchange_n(code, &expected, 0, false,
                                                         __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) {
        if (!cache_push(cls, kDirty, reinterpret_cast<std::intptr_t>(ptr)))
          flush_dirty(cls, static_cast<char*>(ptr));
        return;
      }
    }
    free_slow(ptr, size);  // debug mode, large objects, and every bad free (reported there)
  }

  /// Moves the free objects cached for `index` (any index, also while threads use it) to the
  /// central lists, where every index's allocations find them: for caches of indices no thread
  /// uses any more (CPUs gone idle or offline, mm_cid values of exited threads). Returns the
  /// number of objects moved. Costs one fence of `index` (fence_index()) per non-empty stack.
  /// Throws std::out_of_range for an index outside the index space of mode(), and
  /// std::system_error when no fence is possible; nothing is lost then.
  PERCPU_API std::size_t drain_caches(int index);

  /// drain_caches(), reporting remote_errc::no_fence as a value instead (with the objects
  /// moved before the fence failed, which are in the pool's lists; nothing is lost). Throws
  /// std::out_of_range for a bad index, std::bad_alloc.
  PERCPU_API remote_result<std::size_t> try_drain_caches(int index);

  /// Reserved, resident and bookkeeping bytes, live and free objects. Takes the pool's mutex
  /// and a few system calls per chunk: for reports, not hot paths.
  PERCPU_API pool_stats stats() const;

  /// Bytes between consecutive slots of an object.
  std::size_t stride() const noexcept { return stride_; }
  /// Number of slots of every object.
  int slots() const noexcept { return slots_; }
  /// The index mode of the per-CPU caches.
  index_mode mode() const noexcept { return mode_; }

 private:
  static constexpr int kClean = 0;
  static constexpr int kDirty = 1;
  static constexpr int kMaxGroups = 48;
  // Codes of the bookkeeping table, one byte per granule of slot-0 space: the start of a live
  // small object holds its class + 1; these mark other starts.
  static constexpr unsigned char kFreeCode = 0;
  static constexpr unsigned char kLargeCode = 0xFF;        // live, size in live_large_
  static constexpr unsigned char kQuarantinedCode = 0xFE;  // written after free: never reused

  // Chunks are reserved in groups of 2^g (g = 0, 1, ...), so a pointer is located by scanning
  // a few groups. Chunk c of a group starts at base + c * span (span: slots x stride rounded up
  // to a power of two, so locating is shifts and masks).
  struct group {
    char* base = nullptr;
    std::size_t chunks = 0;
    unsigned char* codes = nullptr;    // chunks x units_ bytes
    unsigned char* written = nullptr;  // a bit per page of the chunks: may hold data
  };

  static unsigned char code_for(std::size_t cls) noexcept {
    return static_cast<unsigned char>(cls + 1);
  }

  // The table byte of the granule at `p` when `p` is a granule of some chunk's slot-0 space;
  // nullptr otherwise (foreign, or inside another slot).
  unsigned char* code_of(const char* p) const noexcept {
    const int n = ngroups_.load(std::memory_order_acquire);
    const auto addr = reinterpret_cast<std::uintptr_t>(p);
    for (int g = 0; g < n; ++g) {
      const group& gr = groups_[g];
      const std::uintptr_t off = addr - reinterpret_cast<std::uintptr_t>(gr.base);
      if (off >= (gr.chunks << span_shift_)) continue;
      const std::uintptr_t in_chunk = off & ((std::uintptr_t{1} << span_shift_) - 1);
      if (in_chunk >= stride_ || in_chunk % kGranule != 0) return nullptr;
      return gr.codes + (off >> span_shift_) * units_ + in_chunk / kGranule;
    }
    return nullptr;
  }

  std::intptr_t* cache_words(int index, std::size_t cls, int which) const noexcept {
    return reinterpret_cast<std::intptr_t*>(caches_[index]) +
           (cls * 2 + static_cast<std::size_t>(which)) * (1 + kCacheDepth);
  }
  // The stacks of (cls, which) in every index's region, for the current-index sections.
  arch::slot_table cache_table(std::size_t cls, int which) const noexcept {
    return caches_.table((cls * 2 + static_cast<std::size_t>(which)) * (1 + kCacheDepth) *
                         sizeof(std::intptr_t));
  }
  bool cache_pop(std::size_t cls, int which, std::intptr_t& out) noexcept {
    const arch::slot_table t = cache_table(cls, which);
    return mode_ == index_mode::cpu_id ? detail::stack_pop<index_mode::cpu_id>(t, out)
                                       : detail::stack_pop<index_mode::mm_cid>(t, out);
  }
  bool cache_push(std::size_t cls, int which, std::intptr_t p) noexcept {
    const arch::slot_table t = cache_table(cls, which);
    return mode_ == index_mode::cpu_id ? detail::stack_push<index_mode::cpu_id>(t, kCacheDepth, p)
                                       : detail::stack_push<index_mode::mm_cid>(t, kCacheDepth, p);
  }
  std::size_t cache_pop_many(std::size_t cls, int which, char** out, std::size_t want) noexcept;
  std::size_t cache_push_many(std::size_t cls, int which, char* const* p, std::size_t n) noexcept;

  // fork(): every pool's mutex is held across it, so a child never inherits one locked.
  static void lock_all_for_fork() noexcept;
  static void unlock_all_after_fork() noexcept;
  static void unlock_all_in_child() noexcept;

  // Slow paths (src/pool.cpp); all take mutex_.
  PERCPU_API void* allocate_slow(std::size_t size, const void* init);
  PERCPU_API void free_slow(void* ptr, std::size_t size);
  PERCPU_API void flush_dirty(std::size_t cls, char* p);
  // The rest run with mutex_ held, except clear_batch() (see take_small()).
  char* take_small(std::size_t cls, std::unique_lock<std::mutex>& lock);
  char* take_large(std::size_t bytes);
  std::size_t large_bytes(std::size_t size) const noexcept;
  char* carve(std::size_t bytes);
  void add_group();
  std::size_t written_bytes(std::size_t chunks) const noexcept;
  std::vector<char*>& collect_dirty(std::size_t cls);
  static std::size_t reclaim_threshold(std::size_t bytes);
  struct chunk_ref;
  chunk_ref chunk_of(const char* p) const noexcept;
  bool learn_written(const chunk_ref& c, std::size_t lo, std::size_t hi);
  void clear_batch(std::vector<char*>& objects, std::size_t bytes, unsigned char fill);
  void check_poison(char* p, std::size_t bytes);
  void reuse_poisoned(char* p, std::size_t bytes);
  [[noreturn]] void report_bad_free(const char* p, std::size_t size, const unsigned char* code);

  const index_mode mode_;
  const std::size_t stride_;
  const int slots_;
  const bool debug_;
  const std::size_t chunk_bytes_;  // slots x stride
  const unsigned page_shift_;      // log2 of the page size
  const unsigned span_shift_;      // log2 of the distance between chunks
  const std::size_t units_;        // granules per chunk's slot-0 space
  group groups_[kMaxGroups];
  std::atomic<int> ngroups_{0};  // groups_[0, n) are complete
  region_array caches_;          // per index: kCachedClasses x {clean, dirty} stacks

  mutable std::mutex mutex_;
  // Everything below is guarded by mutex_.
  std::size_t chunk_ = 0;                       // chunk being carved, within the newest group
  std::size_t bump_ = 0;                        // next unused offset of its slot-0 space
  std::vector<char*> central_[kCachedClasses];  // clean, by class
  std::vector<std::vector<char*>> dirty_[kCachedClasses];  // freed, not cleared: by index
  std::unordered_map<std::size_t, std::vector<char*>> central_large_;  // clean, by size
  std::unordered_map<const char*, std::size_t> live_large_;            // live large -> size
  std::size_t carved_ = 0;       // objects ever carved from chunks
  std::size_t quarantined_ = 0;  // objects withdrawn after a write after free
  std::vector<char*> batch_;
};

}  // namespace percpu
