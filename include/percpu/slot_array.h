// Storage with one slot per index of an index space: either its own mapping (slots on their own
// cache lines, mmap'd so a slot no thread touches costs no resident memory), or one object of a
// per-CPU pool (slots a pool stride apart, packed with the pool's other objects of that index).
#pragma once

#define PERCPU_PUBLIC_HEADER 1  // lets it include percpu/internal/

#include <sys/mman.h>

#include <cstddef>
#include <cstdint>
#include <new>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include "percpu/cpu.h"
#include "percpu/internal/config.h"
#include "percpu/internal/current_result.h"
#include "percpu/topology.h"

namespace percpu {

class pool_base;
template <index_mode M>
class pool;

namespace detail {
/// Reserves `bytes` of private anonymous memory, zero-filled by the kernel on first touch (so
/// untouched pages cost no resident memory). Throws std::bad_alloc when mmap fails.
inline void* map_zeroed(std::size_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  return p;
}

/// An object taken from a pool for a structure's slots: slot i is at base + i * stride.
struct pool_object {
  char* base;
  std::size_t stride;
};

/// Allocates a zeroed object of `bytes` from `pool` for a structure with `count` indices.
/// Throws std::invalid_argument when the pool has fewer slots than `count` or `bytes` exceeds
/// its stride, and what pool_base::allocate_bytes() throws.
PERCPU_API pool_object take_from_pool(pool_base& pool, std::size_t bytes, int count);

/// Returns an object taken with take_from_pool(). A failure here is a bug in percpu (the object
/// was taken with these arguments): it terminates with a message.
PERCPU_API void give_back_to_pool(pool_base& pool, void* base, std::size_t bytes) noexcept;
}  // namespace detail

/// Number of indices in the index space of mode M (possible CPUs: cpu_id_bound or
/// mm_cid_bound of machine_topology()).
template <index_mode M>
inline int index_space() {
  const topology& t = machine_topology();
  return M == index_mode::cpu_id ? t.cpu_id_bound : t.mm_cid_bound;
}

/// One T per index, zero-filled before first use. T must be trivially copyable and valid when
/// all-zero (counters, list heads, indices).
///
/// - slot_array(count): its own mapping; each slot starts on its own cache line (stride: sizeof(T)
///   rounded up to 64 bytes), and pages no thread touches stay unpopulated.
/// - slot_array(count, pool): one object of `pool` (stride: the pool's): slots of many structures
///   share each index's pages, so small per-CPU structures cost bytes, not cache lines, per
///   index. The pool must outlive the array; alignof(T) <= 8.
///
/// Throws std::invalid_argument for count <= 0, std::bad_alloc without address space.
template <class T>
class slot_array {
  static_assert(std::is_trivially_copyable_v<T>, "slots are zero-filled memory");

 public:
  /// Bytes between consecutive slots of an array with its own mapping.
  static constexpr std::size_t kLineStride = (sizeof(T) + 63) / 64 * 64;

  /// Reserves `count` slots in a mapping of its own.
  explicit slot_array(int count) : count_(checked(count)), stride_(kLineStride) {
    bytes_ = static_cast<std::size_t>(count) * stride_;
    layout_ = reinterpret_cast<std::uintptr_t>(detail::map_zeroed(bytes_)) |
              (kLineShift != 0 ? 0 : kStrided);
  }

  /// Takes the `count` slots from `from` (see detail::take_from_pool() for what it throws).
  slot_array(int count, pool_base& from) : count_(checked(count)), pool_(&from) {
    static_assert(alignof(T) <= 8, "pool objects are 8-byte aligned");
    const detail::pool_object o = detail::take_from_pool(from, sizeof(T), count);
    stride_ = o.stride;
    layout_ = reinterpret_cast<std::uintptr_t>(o.base) | kStrided;
  }

  ~slot_array() {
    if (pool_ != nullptr) {
      detail::give_back_to_pool(*pool_, base(), sizeof(T));
    } else {
      munmap(base(), bytes_);
    }
  }
  slot_array(const slot_array&) = delete;
  slot_array& operator=(const slot_array&) = delete;

  /// The slot of `index`; precondition 0 <= index < size() (checked by at()) for any access.
  /// Fast paths may take the address of an unchecked index's slot before their critical
  /// section, which compares the index with the section bound before any access: the address
  /// is computed in integers, so an index outside the space (-1 from an unregistered area)
  /// gives an unused address, not undefined pointer arithmetic.
  T& operator[](int index) noexcept { return *reinterpret_cast<T*>(address(index)); }
  const T& operator[](int index) const noexcept {
    return *reinterpret_cast<const T*>(address(index));
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
  /// Bytes between consecutive slots.
  std::size_t stride() const noexcept { return stride_; }
  /// Where the slots lie, for the structures' current-index sections (current_ops.h).
  arch::slot_table table() const noexcept { return {layout_ & ~kStrided, stride_}; }

  /// log2 of kLineStride where it is a power of two (T up to 64 bytes: 6), else 0.
  static constexpr unsigned kLineShift = (kLineStride & (kLineStride - 1)) == 0
                                             ? static_cast<unsigned>(__builtin_ctzll(kLineStride))
                                             : 0;

  /// Returns section(table, shift), shift a std::integral_constant<unsigned, S> for the
  /// current-index sections' Shift (current_ops.h): kLineShift for slots kLineStride apart (an
  /// array with its own mapping), so the section shifts the index by a constant; 0 (multiply by
  /// the stride) for slots taken from a pool. The layout is bit 0 of the word that holds the
  /// base (layout_), so the fast path loads one word and tests one bit, and the common layout
  /// costs no multiply, no stride load and no stride in a register.
  template <class Section>
  PERCPU_ALWAYS_INLINE auto with_table(Section&& section) const noexcept {
    const std::uintptr_t word = layout_;
    if constexpr (kLineShift != 0) {
      if (PERCPU_LIKELY((word & kStrided) == 0))
        return section(arch::slot_table{word, kLineStride},
                       std::integral_constant<unsigned, kLineShift>{});
    }
    return section(arch::slot_table{word & ~kStrided, stride_},
                   std::integral_constant<unsigned, 0>{});
  }

 private:
  std::uintptr_t address(int index) const noexcept {
    return (layout_ & ~kStrided) + static_cast<std::uintptr_t>(index) * stride_;
  }
  static int checked(int count) {
    if (count <= 0) throw std::invalid_argument("percpu::slot_array: count must be positive");
    return count;
  }
  void check(int index) const {
    if (PERCPU_UNLIKELY(static_cast<unsigned>(index) >= static_cast<unsigned>(count_)))
      throw_out_of_range(index);
  }
  // Out of line: the message is built only when thrown, and callers' fast paths stay small.
  [[noreturn, gnu::noinline, gnu::cold]] void throw_out_of_range(int index) const {
    throw std::out_of_range("percpu::slot_array: index " + std::to_string(index) + " outside [0, " +
                            std::to_string(count_) + ")");
  }

  char* base() const noexcept { return reinterpret_cast<char*>(layout_ & ~kStrided); }

  // Bit 0 of layout_: the slots are stride_ apart (taken from a pool, or lines that are not a
  // power of two), not 1 << kLineShift. Slot bases are at least 8-byte aligned, so the bit is
  // free.
  static constexpr std::uintptr_t kStrided = 1;

  std::uintptr_t layout_ = 0;  // the slots' base, with kStrided set where the fast path multiplies
  int count_;
  std::size_t stride_ = 0;
  std::size_t bytes_ = 0;  // of its own mapping
  pool_base* pool_ = nullptr;
};

/// One region of `bytes` bytes per index, zero-filled before first use: the storage of the
/// bounded buffers.
///
/// - region_array(count, bytes): its own mapping; each region starts on its own cache line
///   (stride: bytes rounded up to 64), and pages no thread touches stay unpopulated.
/// - region_array(count, bytes, pool): one object of `pool` (bytes rounded up to 8, at most the
///   pool's stride). The pool must outlive the array.
///
/// Throws std::invalid_argument for count <= 0 or bytes == 0, std::bad_alloc when the address
/// space cannot be reserved.
class region_array {
 public:
  region_array(int count, std::size_t bytes) : count_(checked(count, bytes)) {
    stride_ = (bytes + 63) / 64 * 64;
    total_ = static_cast<std::size_t>(count) * stride_;
    base_ = static_cast<char*>(detail::map_zeroed(total_));
  }
  region_array(int count, std::size_t bytes, pool_base& from)
      : count_(checked(count, bytes)), pool_(&from), object_bytes_((bytes + 7) / 8 * 8) {
    const detail::pool_object o = detail::take_from_pool(from, object_bytes_, count);
    base_ = o.base;
    stride_ = o.stride;
  }
  ~region_array() {
    if (pool_ != nullptr) {
      detail::give_back_to_pool(*pool_, base_, object_bytes_);
    } else {
      munmap(base_, total_);
    }
  }
  region_array(const region_array&) = delete;
  region_array& operator=(const region_array&) = delete;

  /// Start of the region of `index`; precondition 0 <= index < size() (checked by at()) for
  /// any access. Computed in integers, as slot_array's, for fast paths that form an unchecked
  /// index's address before their critical section.
  char* operator[](int index) const noexcept {
    return reinterpret_cast<char*>(reinterpret_cast<std::uintptr_t>(base_) +
                                   static_cast<std::uintptr_t>(index) * stride_);
  }

  /// Start of the region of `index`; throws std::out_of_range outside [0, size()).
  char* at(int index) const {
    if (index < 0 || index >= count_)
      throw std::out_of_range("percpu: index " + std::to_string(index) + " outside [0, " +
                              std::to_string(count_) + ")");
    return (*this)[index];
  }

  /// Number of regions.
  int size() const noexcept { return count_; }

  /// Where the regions lie, `offset` bytes into each: for the current-index sections
  /// (current_ops.h) on a part of every region.
  arch::slot_table table(std::size_t offset = 0) const noexcept {
    return {reinterpret_cast<std::uintptr_t>(base_) + offset, stride_};
  }

  /// Start and length in bytes of its own mapping (for residency statistics); length 0 for
  /// regions taken from a pool (the pool counts those).
  const char* data() const noexcept { return base_; }
  std::size_t bytes() const noexcept { return total_; }

 private:
  static int checked(int count, std::size_t bytes) {
    if (count <= 0 || bytes == 0)
      throw std::invalid_argument("percpu::region_array: count and bytes must be positive");
    return count;
  }

  int count_;
  std::size_t stride_ = 0;
  std::size_t total_ = 0;  // of its own mapping
  char* base_ = nullptr;
  pool_base* pool_ = nullptr;
  std::size_t object_bytes_ = 0;  // of its pool object
};

}  // namespace percpu
