// A per-CPU memory pool, typed: pool<M> hands out percpu_ptr<T, M> handles to objects with one
// slot per index (possible CPU or mm_cid value) at base + index * stride. The layout, the
// per-CPU caches and the checks are pool_base's (pool_base.h).
#pragma once

#define PERCPU_PUBLIC_HEADER 1  // lets it include percpu/internal/

#include "percpu/internal/config.h"  // first: the C++20 check

#include <cstddef>
#include <iterator>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "percpu/cpu.h"
#include "percpu/internal/pool_base.h"
#include "percpu/slot_array.h"

namespace percpu {

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
  explicit pool(const pool_options& options = {})
      : pool_base(M, options.slots == 0 ? index_space<M>() : options.slots, options) {}

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
};

}  // namespace percpu
