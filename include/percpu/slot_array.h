// Storage with one cache-line-aligned slot per index of an index space, mapped with mmap so a
// slot that no thread touches costs no resident memory.
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <new>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "percpu/cpu.h"
#include "percpu/topology.h"

namespace percpu {

namespace detail {
/// Reserves `bytes` of private anonymous memory, zero-filled by the kernel on first touch (so
/// untouched pages cost no resident memory). Throws std::bad_alloc when mmap fails.
inline void* map_zeroed(std::size_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  return p;
}
}  // namespace detail

/// Number of indices in the index space of mode M (possible CPUs: cpu_id_bound or
/// mm_cid_bound of machine_topology()).
template <index_mode M>
inline int index_space() {
  const topology& t = machine_topology();
  return M == index_mode::cpu_id ? t.cpu_id_bound : t.mm_cid_bound;
}

/// One T per index, each slot starting on its own cache line (stride: sizeof(T) rounded up to
/// 64 bytes), zero-filled by the kernel on first touch. T must be trivially copyable and
/// valid when all-zero (counters, list heads, indices).
///
/// Throws std::bad_alloc when the address space cannot be reserved.
template <class T>
class slot_array {
  static_assert(std::is_trivially_copyable_v<T>, "slots are zero-filled memory");

 public:
  /// Bytes between consecutive slots: sizeof(T) rounded up to a 64-byte cache line.
  static constexpr std::size_t kStride = (sizeof(T) + 63) / 64 * 64;

  /// Reserves `count` slots (count >= 1).
  explicit slot_array(int count) : count_(count) {
    if (count <= 0) throw std::invalid_argument("percpu::slot_array: count must be positive");
    bytes_ = static_cast<std::size_t>(count) * kStride;
    void* p = detail::map_zeroed(bytes_);
    base_ = static_cast<char*>(p);
  }
  ~slot_array() { munmap(base_, bytes_); }
  slot_array(const slot_array&) = delete;
  slot_array& operator=(const slot_array&) = delete;

  /// The slot of `index`; precondition 0 <= index < size() (checked by at()).
  T& operator[](int index) noexcept { return *reinterpret_cast<T*>(base_ + index * kStride); }
  const T& operator[](int index) const noexcept {
    return *reinterpret_cast<const T*>(base_ + index * kStride);
  }

  /// The slot of `index`; throws std::out_of_range outside [0, size()).
  T& at(int index) {
    check(index);
    return (*this)[index];
  }
  const T& at(int index) const {
    check(index);
    return (*this)[index];
  }

  /// Number of slots.
  int size() const noexcept { return count_; }

 private:
  void check(int index) const {
    if (index < 0 || index >= count_)
      throw std::out_of_range("percpu::slot_array: index " + std::to_string(index) +
                              " outside [0, " + std::to_string(count_) + ")");
  }

  int count_;
  std::size_t bytes_;
  char* base_;
};

/// One region of `bytes` bytes per index of an index space, each starting on its own cache line
/// (stride: bytes rounded up to 64), zero-filled on first touch and mapped with mmap so that an
/// untouched region costs no resident memory. The storage of the bounded buffers.
///
/// Throws std::invalid_argument for count <= 0 or bytes == 0, std::bad_alloc when the address
/// space cannot be reserved.
class region_array {
 public:
  region_array(int count, std::size_t bytes) : count_(count) {
    if (count <= 0 || bytes == 0)
      throw std::invalid_argument("percpu::region_array: count and bytes must be positive");
    stride_ = (bytes + 63) / 64 * 64;
    total_ = static_cast<std::size_t>(count) * stride_;
    void* p = detail::map_zeroed(total_);
    base_ = static_cast<char*>(p);
  }
  ~region_array() { munmap(base_, total_); }
  region_array(const region_array&) = delete;
  region_array& operator=(const region_array&) = delete;

  /// Start of the region of `index`; precondition 0 <= index < size() (checked by at()).
  char* operator[](int index) const noexcept { return base_ + index * stride_; }

  /// Start of the region of `index`; throws std::out_of_range outside [0, size()).
  char* at(int index) const {
    if (index < 0 || index >= count_)
      throw std::out_of_range("percpu: index " + std::to_string(index) + " outside [0, " +
                              std::to_string(count_) + ")");
    return (*this)[index];
  }

  /// Number of regions.
  int size() const noexcept { return count_; }

  /// Start and length in bytes of the whole mapping (for residency statistics).
  const char* data() const noexcept { return base_; }
  std::size_t bytes() const noexcept { return total_; }

 private:
  int count_;
  std::size_t stride_;
  std::size_t total_;
  char* base_;
};

}  // namespace percpu
