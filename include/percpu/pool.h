// A per-CPU memory pool: objects with one slot per index (possible CPU or mm_cid value), laid
// out at base + index * stride, in address space reserved with mmap and populated only where
// touched, so a slot that no thread uses costs no resident memory.
#pragma once

#include <cstddef>
#include <cstring>
#include <iterator>
#include <mutex>
#include <new>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "percpu/checked.h"
#include "percpu/config.h"
#include "percpu/cpu.h"
#include "percpu/slot_array.h"

namespace percpu {

/// How a pool lays out its memory.
struct pool_options {
  /// Bytes between an object's consecutive slots, and so the bytes of objects one chunk holds
  /// for each index. A multiple of the page size (4096 on x86-64); objects are at most this big.
  std::size_t stride = 64 * 1024;
  /// Number of slots; 0 means the index space of the pool's mode. Set it to model a larger
  /// machine (256 possible CPUs, say): slots no thread uses cost address space, not memory.
  /// Never fewer than the index space (every index must have a slot).
  int slots = 0;
  /// Poison freed objects (0xA5 in every resident slot until reuse) so that a use after free
  /// shows; checked builds by default (PERCPU_CHECKED). Bad frees are reported either way.
  bool debug = kCheckedDefault;
};

/// What a pool holds.
struct pool_stats {
  std::size_t reserved_bytes = 0;  ///< address space reserved (chunks x slots x stride)
  std::size_t resident_bytes = 0;  ///< of which resident now (mincore(2), in whole pages)
  std::size_t live_objects = 0;    ///< allocated and not yet freed
};

/// The untyped pool: see pool<M> for the typed interface. Thread-safe (one mutex; allocation
/// is not on a hot path, use of the slots is).
class PERCPU_API pool_base {
 public:
  /// Throws std::invalid_argument for a stride that is not a positive multiple of the page size,
  /// or a slot count below 1.
  pool_base(int slots, const pool_options& options);
  ~pool_base();
  pool_base(const pool_base&) = delete;
  pool_base& operator=(const pool_base&) = delete;

  /// Allocates an object of `size` bytes (rounded up to 8; alignment 8) and returns the address
  /// of its slot 0. Every slot reads as zero, or as the `size` bytes at `init` when given
  /// (copying an init value touches the object's page in every slot).
  /// Throws std::invalid_argument for size 0 or above the stride, std::bad_alloc without
  /// address space.
  void* allocate_bytes(std::size_t size, const void* init = nullptr);

  /// Returns the object whose slot 0 is `p` (allocated with `size`) to the pool; its memory is
  /// reused by later allocations. Throws std::invalid_argument for a pointer that is not in
  /// this pool, and std::logic_error for a double free, a pointer that is not the start of a
  /// live object, or a size that differs from the allocation's; nothing changes then.
  ///
  /// Clearing writes only slots whose page is resident, so untouched slots stay unpopulated;
  /// on a machine with swap configured it writes every slot (a swapped-out page still holds
  /// data), which populates them.
  void free_bytes(void* p, std::size_t size);

  /// Reserved and resident bytes and live objects.
  pool_stats stats() const;

  /// Bytes between consecutive slots of an object.
  std::size_t stride() const noexcept { return stride_; }
  /// Number of slots of every object.
  int slots() const noexcept { return slots_; }

 private:
  static std::size_t rounded(std::size_t size);
  bool in_pool(const char* p) const;
  void clear_slots(char* p, std::size_t size, unsigned char fill);

  const std::size_t stride_;
  const int slots_;
  const bool debug_;
  mutable std::mutex mutex_;
  std::vector<char*> chunks_;  // each slots_ * stride_ bytes
  std::size_t bump_ = 0;       // next free offset in the newest chunk
  std::unordered_map<std::size_t, std::vector<char*>> free_;  // by rounded size
  std::unordered_map<const char*, std::size_t> live_;         // live object -> rounded size
};

/// A typed handle to an object of a pool<M>: slot `index` of the object is at
/// base + index * stride. Copyable like a raw pointer; it owns nothing (free it through the pool).
template <class T, index_mode M = index_mode::cpu_id>
class percpu_ptr {
 public:
  percpu_ptr() = default;

  /// The slot of `index`. Throws std::out_of_range outside [0, slots()).
  T& at(int index) const {
    if (index < 0 || index >= slots_)
      throw std::out_of_range("percpu::percpu_ptr: index " + std::to_string(index) +
                              " outside [0, " + std::to_string(slots_) + ")");
    return (*this)[index];
  }

  /// The slot of `index`, unchecked (precondition 0 <= index < slots()).
  T& operator[](int index) const noexcept {
    return *reinterpret_cast<T*>(base_ + static_cast<std::size_t>(index) * stride_);
  }

  /// The slot of the calling thread's current index (current_index<M>()). The thread may
  /// migrate right after: use it inside a per-CPU operation, which checks the index again.
  T& local() const noexcept { return (*this)[current_index<M>()]; }

  /// Number of slots.
  int slots() const noexcept { return slots_; }
  /// Bytes between slots.
  std::size_t stride() const noexcept { return stride_; }
  explicit operator bool() const noexcept { return base_ != nullptr; }

  /// Iterates over the slots in index order (a forward iterator; it holds the object's base
  /// and stride, so it stays valid when the handle it came from moves).
  class iterator {
   public:
    using iterator_category = std::forward_iterator_tag;
    using value_type = T;
    using difference_type = std::ptrdiff_t;
    using pointer = T*;
    using reference = T&;
    iterator() = default;
    iterator(char* base, std::size_t stride, int index)
        : base_(base), stride_(stride), index_(index) {}
    T& operator*() const noexcept {
      return *reinterpret_cast<T*>(base_ + static_cast<std::size_t>(index_) * stride_);
    }
    T* operator->() const noexcept { return &**this; }
    iterator& operator++() noexcept {
      ++index_;
      return *this;
    }
    iterator operator++(int) noexcept {
      iterator before = *this;
      ++index_;
      return before;
    }
    bool operator==(const iterator& other) const noexcept {
      return base_ == other.base_ && index_ == other.index_;
    }

   private:
    char* base_ = nullptr;
    std::size_t stride_ = 0;
    int index_ = 0;
  };
  iterator begin() const noexcept { return iterator(base_, stride_, 0); }
  iterator end() const noexcept { return iterator(base_, stride_, slots_); }

 private:
  template <index_mode>
  friend class pool;
  percpu_ptr(char* base, std::size_t stride, int slots)
      : base_(base), stride_(stride), slots_(slots) {}
  char* base_ = nullptr;
  std::size_t stride_ = 0;
  int slots_ = 0;
};

/// A pool of per-CPU objects indexed by mode M (cpu_id or mm_cid).
///
///   percpu::pool<> pool;                              // one slot per possible CPU
///   auto hits = pool.allocate<std::intptr_t>();       // zero in every slot
///   percpu::retry<percpu::index_mode::cpu_id>([&](int cpu) {
///     return percpu::add<percpu::index_mode::cpu_id>(&hits[cpu], 1, cpu);
///   });
///   pool.free(hits);
template <index_mode M = index_mode::cpu_id>
class pool : public pool_base {
 public:
  /// A pool with `options` (slots default to the index space of M). Throws
  /// std::invalid_argument for fewer slots than the index space, or a bad stride.
  explicit pool(const pool_options& options = {}) : pool_base(slot_count(options), options) {}

  /// A zeroed T in every slot. Throws as pool_base::allocate_bytes.
  template <class T>
  percpu_ptr<T, M> allocate() {
    static_assert(std::is_trivially_copyable_v<T> && alignof(T) <= 8,
                  "pool objects are raw memory: trivially copyable, alignment at most 8");
    return percpu_ptr<T, M>(static_cast<char*>(allocate_bytes(sizeof(T))), stride(), slots());
  }

  /// A copy of `init` in every slot, visible before first use.
  template <class T>
  percpu_ptr<T, M> allocate(const T& init) {
    static_assert(std::is_trivially_copyable_v<T> && alignof(T) <= 8,
                  "pool objects are raw memory: trivially copyable, alignment at most 8");
    return percpu_ptr<T, M>(static_cast<char*>(allocate_bytes(sizeof(T), &init)), stride(),
                            slots());
  }

  /// Returns `p`'s object to the pool and nulls `p`; a null `p` is left alone. Throws as
  /// pool_base::free_bytes (a copy of a handle already freed is a double free).
  template <class T>
  void free(percpu_ptr<T, M>& p) {
    if (!p) return;
    free_bytes(p.base_, sizeof(T));
    p = percpu_ptr<T, M>();
  }

 private:
  static int slot_count(const pool_options& options) {
    const int space = index_space<M>();
    if (options.slots == 0) return space;
    if (options.slots < space)
      throw std::invalid_argument("percpu::pool: " + std::to_string(options.slots) +
                                  " slots is fewer than the index space (" + std::to_string(space) +
                                  ")");
    return options.slots;
  }
};

}  // namespace percpu
