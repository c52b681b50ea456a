// The bucket layout of percpu::histogram: log-linear buckets over [0, max_value], after
// HdrHistogram's (https://github.com/HdrHistogram/HdrHistogram: a power-of-two range split into
// 2^precision_bits equal sub-buckets).
#pragma once

#define PERCPU_PUBLIC_HEADER 1  // lets it include percpu/internal/

#include "percpu/internal/config.h"  // first: the C++20 check

#include <bit>
#include <cstddef>
#include <cstdint>
#include <stdexcept>

namespace percpu {

/// Where a value falls in a histogram: a pure function of (precision_bits, max_value).
///
/// With m = 2^precision_bits, the values 0 .. 2m - 1 each have a bucket of their own (exact);
/// above, each power-of-two range [2^k, 2^(k+1)) is split into m buckets of equal width
/// 2^(k - precision_bits). So a value's bucket spans at most value / 2^precision_bits: the
/// relative error of any value read back from a bucket (lowest(i) .. highest(i)) is below
/// 2^-precision_bits (precision_bits 7: under 0.79%). The buckets run up to the one holding
/// max_value; a recorded value above max_value is counted in that last bucket (and as above
/// range by the histogram).
///
/// Bucket count: index_of(max_value) + 1, at most (bit_width(max_value) - precision_bits + 1) * m.
/// Precision 7 up to one hour in nanoseconds (the defaults): 4608 buckets.
///
/// All members are constexpr-friendly, noexcept after construction, and thread-safe (the object
/// is immutable).
class histogram_layout {
 public:
  /// The defaults: 1/128 relative precision, values up to one hour in nanoseconds.
  static constexpr int kDefaultPrecisionBits = 7;
  static constexpr std::uint64_t kDefaultMaxValue = 3'600'000'000'000;
  /// The largest precision: 2^14 sub-buckets (HdrHistogram's 4 significant digits).
  static constexpr int kMaxPrecisionBits = 14;
  /// The most buckets a layout may have (two arrays of them per CPU): 2^18, 2 MiB a bank.
  static constexpr std::size_t kMaxBuckets = std::size_t{1} << 18;

  /// Throws std::invalid_argument unless 0 <= precision_bits <= 14, max_value >= 1, and the
  /// layout has at most kMaxBuckets buckets.
  constexpr histogram_layout(int precision_bits = kDefaultPrecisionBits,
                             std::uint64_t max_value = kDefaultMaxValue)
      : p_(checked_precision(precision_bits)),
        max_(max_value != 0 ? max_value
                            : throw std::invalid_argument(
                                  "percpu::histogram_layout: max_value must be at least 1")),
        count_(checked_count(index_unclamped(max_) + 1)) {}

  /// log2 of the sub-buckets per power of two (relative precision 2^-precision_bits).
  int precision_bits() const noexcept { return p_; }
  /// The highest value with a bucket of its own range (larger ones count in the last bucket).
  std::uint64_t max_value() const noexcept { return max_; }
  /// Number of buckets.
  std::size_t bucket_count() const noexcept { return count_; }

  /// The bucket of v (v above max_value: the last bucket). O(1): a bit scan and a shift.
  PERCPU_ALWAYS_INLINE std::size_t index_of(std::uint64_t v) const noexcept {
    return index_unclamped(v < max_ ? v : max_);
  }

  /// The lowest value of bucket i (precondition i < bucket_count()).
  constexpr std::uint64_t lowest(std::size_t i) const noexcept {
    const std::uint64_t m = std::uint64_t{1} << p_;
    if (i < 2 * m) return i;
    const unsigned shift = static_cast<unsigned>(i / m - 1);
    return (i - shift * m) << shift;
  }

  /// The highest value of bucket i (the last bucket: max_value).
  constexpr std::uint64_t highest(std::size_t i) const noexcept {
    const std::uint64_t m = std::uint64_t{1} << p_;
    std::uint64_t h = i;
    if (i >= 2 * m) {
      const unsigned shift = static_cast<unsigned>(i / m - 1);
      h = lowest(i) + ((std::uint64_t{1} << shift) - 1);
    }
    return h < max_ ? h : max_;
  }

  friend constexpr bool operator==(const histogram_layout& a, const histogram_layout& b) noexcept {
    return a.p_ == b.p_ && a.max_ == b.max_;
  }

 private:
  static constexpr int checked_precision(int p) {
    if (p < 0 || p > kMaxPrecisionBits)
      throw std::invalid_argument("percpu::histogram_layout: precision_bits must be in [0, 14]");
    return p;
  }
  static constexpr std::size_t checked_count(std::uint64_t n) {
    if (n > kMaxBuckets)
      throw std::invalid_argument(
          "percpu::histogram_layout: more than 2^18 buckets (lower the precision or the range)");
    return static_cast<std::size_t>(n);
  }
  // shift = max(0, bit_width(v) - precision_bits - 1); index = shift * m + (v >> shift).
  PERCPU_ALWAYS_INLINE constexpr std::size_t index_unclamped(std::uint64_t v) const noexcept {
    const int width = std::bit_width(v);
    const int shift = width > p_ + 1 ? width - p_ - 1 : 0;
    return (static_cast<std::size_t>(shift) << p_) + static_cast<std::size_t>(v >> shift);
  }

  int p_;
  std::uint64_t max_;
  std::size_t count_;
};

}  // namespace percpu
