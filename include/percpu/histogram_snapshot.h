// A histogram's recorded values at one instant: bucket counts, their total, the sum of the
// values, quantiles, merging. What percpu::histogram::snapshot() returns.
#pragma once

#define PERCPU_PUBLIC_HEADER 1  // lets it include percpu/internal/

#include "percpu/internal/config.h"  // first: the C++20 check

#include <cstddef>
#include <cstdint>
#include <vector>

#include "percpu/histogram_layout.h"

namespace percpu {

namespace detail {
class histogram_core;
}  // namespace detail

/// A plain value (copyable, movable, no link to the histogram it came from): one count per
/// bucket of its layout, the sum of the recorded values and how many were above the range.
///
/// Consistency: a snapshot taken from a histogram holds exactly the records that completed
/// before some instant during snapshot() and none after it, so count() is the sum of the
/// buckets and sum() is the sum of exactly those records' values.
///
/// Thread safety: a const snapshot may be read from any number of threads; merge() and reset()
/// need exclusive access, as for any value.
class histogram_snapshot {
 public:
  /// An empty snapshot of `layout`. Throws std::bad_alloc.
  explicit histogram_snapshot(const histogram_layout& layout = {})
      : layout_(layout), counts_(layout.bucket_count(), 0) {}

  /// The bucket layout (the histogram's it came from).
  const histogram_layout& layout() const noexcept { return layout_; }

  /// Number of values recorded in bucket i (layout().lowest(i) .. layout().highest(i)).
  /// Precondition: i < layout().bucket_count(); bucket(i) checks it (std::out_of_range).
  std::uint64_t operator[](std::size_t i) const noexcept { return counts_[i]; }
  std::uint64_t bucket(std::size_t i) const { return counts_.at(i); }
  const std::vector<std::uint64_t>& buckets() const noexcept { return counts_; }

  /// Number of values recorded: the sum of the buckets. O(1) (kept with the buckets). It never
  /// wraps: add_bucket() and merge() refuse a change that would take it past 2^64 - 1, so no
  /// bucket wraps either and quantiles stay right.
  std::uint64_t count() const noexcept { return count_; }
  /// Sum of the recorded values (wraps modulo 2^64, as unsigned arithmetic does).
  std::uint64_t sum() const noexcept { return sum_; }
  /// Number of recorded values above layout().max_value() (counted in the last bucket too).
  std::uint64_t above_range() const noexcept { return above_; }
  /// sum() / count() (0 when empty).
  PERCPU_API double mean() const noexcept;

  /// The value at quantile q in [0, 1]: the highest value of the bucket that holds the
  /// ceil(q' * count())-th smallest recorded value (at least the first; q' is q one double
  /// step down), as HdrHistogram's getValueAtPercentile (Java) reports; within the layout's
  /// relative precision of that value.
  /// 0 when empty. Throws std::invalid_argument for q outside [0, 1] (NaN included).
  PERCPU_API std::uint64_t value_at_quantile(double q) const;

  /// Number of recorded values whose bucket lies wholly at or below v: the cumulative count a
  /// Prometheus bucket with upper bound v reports (a bucket that straddles v counts above it,
  /// so the answer is exact when v is some bucket's highest value). Values recorded above the
  /// range count above every v below 2^64 - 1.
  PERCPU_API std::uint64_t count_at_or_below(std::uint64_t v) const noexcept;

  /// The lowest and highest recorded value, to the layout's precision (the lowest value of the
  /// first nonempty bucket, the highest of the last); 0 when empty.
  PERCPU_API std::uint64_t min() const noexcept;
  PERCPU_API std::uint64_t max() const noexcept;

  /// Adds other's records to this one's. Throws, changing nothing, std::invalid_argument when
  /// the layouts differ and std::overflow_error when count() would pass 2^64 - 1 (sum() and
  /// above_range() wrap modulo 2^64).
  PERCPU_API histogram_snapshot& merge(const histogram_snapshot& other);

  /// Empties it (the layout stays).
  PERCPU_API void reset() noexcept;

  /// Adds `n` records to bucket i with total value `sum` and `above` of them above range: how
  /// a histogram fills a snapshot, and how tests and importers build one. Precondition:
  /// i < layout().bucket_count() (std::out_of_range otherwise, nothing changed). Throws
  /// std::overflow_error, changing nothing, when count() would pass 2^64 - 1.
  PERCPU_API void add_bucket(std::size_t i, std::uint64_t n);
  /// Adds s to sum() (modulo 2^64); pair it with the add_bucket() calls of those values.
  void add_sum(std::uint64_t s) noexcept { sum_ += s; }
  /// Adds n to above_range() (modulo 2^64); those values belong in the last bucket too
  /// (add_bucket()).
  void add_above_range(std::uint64_t n) noexcept { above_ += n; }

 private:
  friend class detail::histogram_core;
  // A histogram's fold of its banks into its total: it must not throw (fork handlers run it), and
  // the total of the records a histogram takes cannot reach 2^64 (centuries of records), so it
  // leaves out add_bucket()'s check.
  void fold_bucket(std::size_t i, std::uint64_t n) noexcept {
    counts_[i] += n;
    count_ += n;
  }

  histogram_layout layout_;
  std::vector<std::uint64_t> counts_;
  std::uint64_t count_ = 0;
  std::uint64_t sum_ = 0;
  std::uint64_t above_ = 0;
};

}  // namespace percpu
