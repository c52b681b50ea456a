// histogram_snapshot's arithmetic (percpu/histogram_snapshot.h says the contract).
#include "percpu/histogram_snapshot.h"

#include <cmath>
#include <stdexcept>

namespace percpu {

double histogram_snapshot::mean() const noexcept {
  return count_ == 0 ? 0.0 : static_cast<double>(sum_) / static_cast<double>(count_);
}

std::uint64_t histogram_snapshot::value_at_quantile(double q) const {
  if (!(q >= 0.0 && q <= 1.0))
    throw std::invalid_argument("percpu::histogram_snapshot: a quantile must be in [0, 1]");
  if (count_ == 0) return 0;
  // The rank of the value asked for, 1-based: ceil(q * count), at least 1, with q first moved
  // one step down, in double, as HdrHistogram's getValueAtPercentile does (Java), so that a q
  // whose double is a hair above its decimal (0.9, 0.07) does not take the next rank.
  const double below = std::nextafter(q, -1.0);
  const double exact = (below < 0 ? 0.0 : below) * static_cast<double>(count_);
  std::uint64_t rank = static_cast<std::uint64_t>(std::ceil(exact));
  if (rank == 0) rank = 1;
  if (rank > count_) rank = count_;
  std::uint64_t seen = 0;
  for (std::size_t i = 0; i < counts_.size(); ++i) {
    seen += counts_[i];
    if (seen >= rank) return layout_.highest(i);
  }
  return layout_.max_value();  // not reached: the buckets sum to count_
}

std::uint64_t histogram_snapshot::count_at_or_below(std::uint64_t v) const noexcept {
  std::uint64_t n = 0;
  for (std::size_t i = 0; i < counts_.size() && layout_.highest(i) <= v; ++i) n += counts_[i];
  // The last bucket also holds the values above the range, which are above any v but the
  // largest.
  if (v < UINT64_MAX && layout_.highest(counts_.size() - 1) <= v) n -= above_;
  return n;
}

std::uint64_t histogram_snapshot::min() const noexcept {
  for (std::size_t i = 0; i < counts_.size(); ++i)
    if (counts_[i] != 0) return layout_.lowest(i);
  return 0;
}

std::uint64_t histogram_snapshot::max() const noexcept {
  for (std::size_t i = counts_.size(); i-- > 0;)
    if (counts_[i] != 0) return layout_.highest(i);
  return 0;
}

histogram_snapshot& histogram_snapshot::merge(const histogram_snapshot& other) {
  if (!(other.layout_ == layout_))
    throw std::invalid_argument(
        "percpu::histogram_snapshot::merge: the snapshots have different layouts");
  // Every bucket is at most count_, so no bucket wraps when count_ does not.
  if (other.count_ > UINT64_MAX - count_)
    throw std::overflow_error(
        "percpu::histogram_snapshot::merge: the count would pass 2^64 - 1 records");
  for (std::size_t i = 0; i < counts_.size(); ++i) counts_[i] += other.counts_[i];
  count_ += other.count_;
  sum_ += other.sum_;
  above_ += other.above_;
  return *this;
}

void histogram_snapshot::reset() noexcept {
  for (std::uint64_t& c : counts_) c = 0;
  count_ = sum_ = above_ = 0;
}

void histogram_snapshot::add_bucket(std::size_t i, std::uint64_t n) {
  std::uint64_t& bucket = counts_.at(i);
  if (n > UINT64_MAX - count_)
    throw std::overflow_error(
        "percpu::histogram_snapshot::add_bucket: the count would pass 2^64 - 1 records");
  bucket += n;
  count_ += n;
}

}  // namespace percpu
