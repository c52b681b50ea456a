// Fuzz target: histogram_layout, histogram_snapshot and histogram<M> against a plain model.
//
// The input picks a layout (any precision and range: a layout the constructor refuses must
// throw std::invalid_argument, and exactly those the header's rules refuse), then a sequence of
// operations on four snapshots (three of the layout, one of another) and, when the input asks,
// a histogram: records, add_bucket() with any index and count, sums, merges (self, foreign
// layout, past 2^64 - 1 records), resets, copies, quantiles, count_at_or_below(), min, max,
// mean. Each answer is checked against a model written here from the headers' words alone:
// the buckets' edges from "2^precision_bits equal sub-buckets per power of two", the counts as
// a map of nonempty buckets, a quantile as a walk over that map.
#include <fuzzer/FuzzedDataProvider.h>
#include <percpu/histogram.h>
#include <percpu/histogram_layout.h>
#include <percpu/histogram_snapshot.h>
#include <percpu/remote.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <system_error>
#include <vector>

#include "fuzz_check.h"

namespace {

using percpu::histogram_layout;
using percpu::histogram_snapshot;

constexpr std::uint64_t kMax64 = std::numeric_limits<std::uint64_t>::max();

// ---- The model of a layout ------------------------------------------------------------------

// Values 0 .. 2m - 1 (m = 2^p) have a bucket each; above, [2^k, 2^(k+1)) has m buckets of width
// 2^(k - p). Bucket 2m + r * m + t is the t-th of the power of two 2^(p + 1 + r).
struct model_layout {
  int p;
  std::uint64_t max;

  std::uint64_t m() const { return std::uint64_t{1} << p; }

  static int floor_log2(std::uint64_t v) {  // v > 0
    int k = 0;
    while (k < 63 && (v >> (k + 1)) != 0) ++k;
    return k;
  }

  // The bucket of v (above max: max's).
  std::uint64_t index(std::uint64_t v) const {
    if (v > max) v = max;
    if (v < 2 * m()) return v;
    const int k = floor_log2(v);
    const int r = k - p - 1;
    const std::uint64_t t = (v - (std::uint64_t{1} << k)) >> (r + 1);
    return 2 * m() + static_cast<std::uint64_t>(r) * m() + t;
  }

  std::uint64_t count() const { return index(max) + 1; }

  std::uint64_t lowest(std::uint64_t i) const {
    if (i < 2 * m()) return i;
    const std::uint64_t j = i - 2 * m(), r = j / m(), t = j % m();
    return (std::uint64_t{1} << (p + 1 + r)) + t * (std::uint64_t{2} << r);
  }

  std::uint64_t highest(std::uint64_t i) const {
    std::uint64_t h = i;
    if (i >= 2 * m()) {
      const std::uint64_t r = (i - 2 * m()) / m();
      h = lowest(i) + ((std::uint64_t{2} << r) - 1);
    }
    return h < max ? h : max;
  }

  // The header's rules: 0 <= precision_bits <= 14, max_value >= 1, at most 2^18 buckets.
  bool valid() const {
    return p >= 0 && p <= histogram_layout::kMaxPrecisionBits && max >= 1 &&
           count() <= histogram_layout::kMaxBuckets;
  }
};

// ---- The model of a snapshot ----------------------------------------------------------------

struct model_snapshot {
  std::map<std::uint64_t, std::uint64_t> buckets;  // nonempty ones
  std::uint64_t count = 0, sum = 0, above = 0;

  std::uint64_t at(std::uint64_t i) const {
    auto it = buckets.find(i);
    return it == buckets.end() ? 0 : it->second;
  }
  void add(std::uint64_t i, std::uint64_t n) {
    if (n == 0) return;
    buckets[i] += n;
    count += n;
  }
};

// The highest value of the bucket holding the rank-th smallest value (1-based).
std::uint64_t value_at_rank(const model_snapshot& s, const model_layout& l, std::uint64_t rank) {
  std::uint64_t seen = 0;
  for (const auto& [i, n] : s.buckets) {
    seen += n;
    if (seen >= rank) return l.highest(i);
  }
  FUZZ_CHECK(!"a rank beyond the count");
  return 0;
}

// The header's rule: rank ceil(q' * count) with q' one double step below q, at least 1.
std::uint64_t model_quantile(const model_snapshot& s, const model_layout& l, double q) {
  if (s.count == 0) return 0;
  double below = std::nextafter(q, -1.0);
  if (below < 0) below = 0;
  const double exact = std::ceil(below * static_cast<double>(s.count));
  std::uint64_t rank = exact >= 18446744073709551616.0 ? kMax64 : static_cast<std::uint64_t>(exact);
  if (rank == 0) rank = 1;
  if (rank > s.count) rank = s.count;
  return value_at_rank(s, l, rank);
}

std::uint64_t model_count_at_or_below(const model_snapshot& s, const model_layout& l,
                                      std::uint64_t v) {
  std::uint64_t n = 0;
  for (const auto& [i, c] : s.buckets)
    if (l.highest(i) <= v) n += c;
  // The values above the range sit in the last bucket but lie above every v < 2^64 - 1.
  if (v != kMax64 && l.highest(l.count() - 1) <= v) n -= s.above;
  return n;
}

// A hash of everything a snapshot holds: "nothing changed" without a copy of its buckets.
std::uint64_t digest(const histogram_snapshot& s) {
  std::uint64_t h = 1469598103934665603ull;
  const auto mix = [&h](std::uint64_t v) { h = (h ^ v) * 1099511628211ull; };
  for (std::uint64_t c : s.buckets()) mix(c);
  mix(s.count());
  mix(s.sum());
  mix(s.above_range());
  return h;
}

void check_equal(const histogram_snapshot& s, const model_snapshot& m, const model_layout& l) {
  FUZZ_CHECK(s.count() == m.count);
  FUZZ_CHECK(s.sum() == m.sum);
  FUZZ_CHECK(s.above_range() == m.above);
  FUZZ_CHECK(s.buckets().size() == l.count());
  std::uint64_t total = 0;
  auto next = m.buckets.begin();  // the model's next nonempty bucket
  for (std::size_t i = 0; i < s.buckets().size(); ++i) {
    std::uint64_t expected = 0;
    if (next != m.buckets.end() && next->first == i) expected = (next++)->second;
    FUZZ_CHECK_MSG(s[i] == expected, "bucket %zu: %llu, model %llu", i,
                   static_cast<unsigned long long>(s[i]),
                   static_cast<unsigned long long>(expected));
    total += s[i];
  }
  FUZZ_CHECK(next == m.buckets.end());
  FUZZ_CHECK(total == s.count());
}

// Every query of a snapshot against the model, for a few arguments from the input.
void check_queries(FuzzedDataProvider& in, const histogram_snapshot& s, const model_snapshot& m,
                   const model_layout& l) {
  FUZZ_CHECK(s.count() == m.count);
  FUZZ_CHECK(s.sum() == m.sum);
  FUZZ_CHECK(s.above_range() == m.above);
  const double mean =
      m.count == 0 ? 0.0 : static_cast<double>(m.sum) / static_cast<double>(m.count);
  FUZZ_CHECK(s.mean() == mean);
  FUZZ_CHECK(s.min() == (m.buckets.empty() ? 0 : l.lowest(m.buckets.begin()->first)));
  FUZZ_CHECK(s.max() == (m.buckets.empty() ? 0 : l.highest(m.buckets.rbegin()->first)));
  FUZZ_CHECK(s.value_at_quantile(0.0) == (m.count == 0 ? 0 : value_at_rank(m, l, 1)));
  // q = 1 names the last rank while q' * count stays within a double's precision of count (above
  // 2^53 records the rule's step down takes ranks off the top, as in HdrHistogram).
  if (m.count <= (1ull << 53))
    FUZZ_CHECK(s.value_at_quantile(1.0) == (m.count == 0 ? 0 : value_at_rank(m, l, m.count)));
  FUZZ_CHECK(s.count_at_or_below(kMax64) == m.count);
  if (m.count > 0) {
    // k / count as a double must name rank k (the reason for the step down).
    const std::uint64_t k =
        in.ConsumeIntegralInRange<std::uint64_t>(1, m.count < (1ull << 50) ? m.count : 1ull << 50);
    if (m.count < (1ull << 50)) {
      const double q = static_cast<double>(k) / static_cast<double>(m.count);
      FUZZ_CHECK_MSG(s.value_at_quantile(q) == value_at_rank(m, l, k),
                     "q %.17g = %llu / %llu: %llu, rank %llu's %llu", q,
                     static_cast<unsigned long long>(k), static_cast<unsigned long long>(m.count),
                     static_cast<unsigned long long>(s.value_at_quantile(q)),
                     static_cast<unsigned long long>(k),
                     static_cast<unsigned long long>(value_at_rank(m, l, k)));
    }
  }
}

// A value: small, near the range's top, a bucket edge, or anything.
std::uint64_t consume_value(FuzzedDataProvider& in, const model_layout& l) {
  switch (in.ConsumeIntegralInRange<int>(0, 5)) {
    case 0:
      return in.ConsumeIntegralInRange<std::uint64_t>(0, 300);
    case 1:
      return l.max + in.ConsumeIntegralInRange<std::uint64_t>(0, 4) - 2;  // wraps near 0: fine
    case 2:
      return l.lowest(in.ConsumeIntegralInRange<std::uint64_t>(0, l.count() - 1));
    case 3:
      return l.highest(in.ConsumeIntegralInRange<std::uint64_t>(0, l.count() - 1)) + 1;
    case 4:
      return kMax64 - in.ConsumeIntegralInRange<std::uint64_t>(0, 2);
    default:
      return in.ConsumeIntegral<std::uint64_t>();
  }
}

// A count for add_bucket(): small, large, or near 2^64.
std::uint64_t consume_count(FuzzedDataProvider& in) {
  switch (in.ConsumeIntegralInRange<int>(0, 3)) {
    case 0:
      return in.ConsumeIntegralInRange<std::uint64_t>(0, 10);
    case 1:
      return in.ConsumeIntegral<std::uint32_t>();
    case 2:
      return kMax64 - in.ConsumeIntegralInRange<std::uint64_t>(0, 3);
    default:
      return in.ConsumeIntegral<std::uint64_t>();
  }
}

double consume_quantile(FuzzedDataProvider& in) {
  switch (in.ConsumeIntegralInRange<int>(0, 3)) {
    case 0:
      return in.ConsumeProbability<double>();
    case 1: {
      static const double kSpecial[] = {0.0,
                                        -0.0,
                                        1.0,
                                        0.5,
                                        0.9,
                                        0.99,
                                        0.999,
                                        0.07,
                                        std::nextafter(1.0, 2.0),
                                        std::nextafter(0.0, -1.0),
                                        std::numeric_limits<double>::quiet_NaN(),
                                        std::numeric_limits<double>::infinity(),
                                        -std::numeric_limits<double>::infinity(),
                                        std::numeric_limits<double>::denorm_min(),
                                        -1.0,
                                        2.0};
      return kSpecial[in.ConsumeIntegralInRange<std::size_t>(0, std::size(kSpecial) - 1)];
    }
    case 2:
      return in.ConsumeIntegralInRange<int>(0, 1000) / 1000.0;
    default:
      return in.ConsumeFloatingPoint<double>();
  }
}

model_layout consume_layout(FuzzedDataProvider& in) {
  model_layout l{};
  l.p = in.ConsumeBool() ? in.ConsumeIntegralInRange<int>(-2, 16) : in.ConsumeIntegral<int>();
  switch (in.ConsumeIntegralInRange<int>(0, 4)) {
    case 0:
      l.max = in.ConsumeIntegralInRange<std::uint64_t>(0, 5000);
      break;
    case 1: {  // a power of two, give or take one
      const int k = in.ConsumeIntegralInRange<int>(0, 63);
      l.max = (std::uint64_t{1} << k) + in.ConsumeIntegralInRange<std::uint64_t>(0, 2) - 1;
      break;
    }
    case 2:
      l.max = histogram_layout::kDefaultMaxValue;
      break;
    case 3:
      l.max = kMax64 - in.ConsumeIntegralInRange<std::uint64_t>(0, 1);
      break;
    default:
      l.max = in.ConsumeIntegral<std::uint64_t>();
  }
  return l;
}

// The constructor: the layout, or std::invalid_argument exactly when the model refuses it.
std::optional<histogram_layout> construct(const model_layout& l) {
  std::optional<histogram_layout> out;
  try {
    out.emplace(l.p, l.max);
  } catch (const std::invalid_argument&) {
    FUZZ_CHECK_MSG(!l.valid(), "layout (%d, %llu) refused", l.p,
                   static_cast<unsigned long long>(l.max));
    return std::nullopt;
  } catch (...) {
    FUZZ_CHECK(!"the layout constructor threw something else than std::invalid_argument");
  }
  FUZZ_CHECK_MSG(l.valid(), "layout (%d, %llu) accepted", l.p,
                 static_cast<unsigned long long>(l.max));
  return out;
}

void check_layout(FuzzedDataProvider& in, const histogram_layout& real, const model_layout& l) {
  FUZZ_CHECK(real.precision_bits() == l.p);
  FUZZ_CHECK(real.max_value() == l.max);
  FUZZ_CHECK(real.bucket_count() == l.count());
  const std::size_t last = real.bucket_count() - 1;
  FUZZ_CHECK(real.highest(last) == l.max);
  FUZZ_CHECK(real.index_of(kMax64) == last);
  FUZZ_CHECK(real.index_of(l.max) == last);
  FUZZ_CHECK(real.index_of(0) == 0 && real.lowest(0) == 0);
  for (int n = 0; n < 8; ++n) {
    const std::size_t i = in.ConsumeIntegralInRange<std::size_t>(0, last);
    FUZZ_CHECK(real.lowest(i) == l.lowest(i));
    FUZZ_CHECK(real.highest(i) == l.highest(i));
    FUZZ_CHECK(real.lowest(i) <= real.highest(i));
    FUZZ_CHECK(real.index_of(real.lowest(i)) == i);
    FUZZ_CHECK(real.index_of(real.highest(i)) == i);
    if (i > 0) FUZZ_CHECK(real.lowest(i) == real.highest(i - 1) + 1);
    // The relative precision: a bucket spans less than lowest / 2^p (one value below 2m).
    const std::uint64_t span = real.highest(i) - real.lowest(i);
    FUZZ_CHECK(span == 0 || span < (real.lowest(i) >> l.p));
    const std::uint64_t v = consume_value(in, l);
    const std::size_t b = real.index_of(v);
    FUZZ_CHECK(b == l.index(v));
    const std::uint64_t clamped = v < l.max ? v : l.max;
    FUZZ_CHECK(real.lowest(b) <= clamped && clamped <= real.highest(b));
  }
  const histogram_layout copy = real;
  FUZZ_CHECK(copy == real);
}

template <class H>
struct recorder {
  H histogram;
  model_snapshot model;
  explicit recorder(const histogram_layout& layout) : histogram(layout) {}
};

// A histogram's snapshot against its model of the records (nothing, when no fence is possible:
// the contract lets a snapshot fail then, keeping the records).
template <class H>
void check_histogram(recorder<H>& r, const model_layout& l, bool reset) {
  histogram_snapshot s(r.histogram.layout());
  const std::error_code e =
      reset ? r.histogram.snapshot_and_reset_or_error(s) : r.histogram.snapshot_or_error(s);
  if (e) {
    FUZZ_CHECK(e == percpu::remote_errc::no_fence);
    return;
  }
  check_equal(s, r.model, l);
  if (reset) r.model = model_snapshot{};
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzedDataProvider in(data, size);
  const model_layout l = consume_layout(in);
  const std::optional<histogram_layout> built = construct(l);
  // A second layout, for the merges that must be refused.
  const model_layout other_model = consume_layout(in);
  const std::optional<histogram_layout> other = construct(other_model);
  if (!built) return 0;
  const histogram_layout& layout = *built;
  check_layout(in, layout, l);
  if (other) FUZZ_CHECK((*other == layout) == (other_model.p == l.p && other_model.max == l.max));

  std::vector<histogram_snapshot> snaps(3, histogram_snapshot(layout));
  std::vector<model_snapshot> models(3);
  std::optional<histogram_snapshot> foreign;
  if (other && !(*other == layout)) {
    foreign.emplace(*other);
    foreign->add_bucket(0, 1);
  }
  // A histogram in either index mode, when the input asks for one.
  std::unique_ptr<recorder<percpu::histogram<percpu::index_mode::cpu_id>>> by_cpu;
  std::unique_ptr<recorder<percpu::histogram<percpu::index_mode::mm_cid>>> by_cid;
  switch (in.ConsumeIntegralInRange<int>(0, 3)) {
    case 1:
      by_cpu = std::make_unique<recorder<percpu::histogram<percpu::index_mode::cpu_id>>>(layout);
      break;
    case 2:
      by_cid = std::make_unique<recorder<percpu::histogram<percpu::index_mode::mm_cid>>>(layout);
      break;
    default:
      break;
  }
  const std::size_t last = layout.bucket_count() - 1;

  for (int step = 0; step < 64 && in.remaining_bytes() > 0; ++step) {
    const std::size_t which = in.ConsumeIntegralInRange<std::size_t>(0, 2);
    histogram_snapshot& s = snaps[which];
    model_snapshot& m = models[which];
    switch (in.ConsumeIntegralInRange<int>(0, 11)) {
      case 0: {  // a record, as a histogram fills a snapshot
        const std::uint64_t v = consume_value(in, l);
        const std::uint64_t i = l.index(v);
        if (m.count == kMax64) {
          const std::uint64_t before = digest(s);
          try {
            s.add_bucket(layout.index_of(v), 1);
            FUZZ_CHECK(!"add_bucket() took the count past 2^64 - 1");
          } catch (const std::overflow_error&) {
          }
          FUZZ_CHECK(digest(s) == before && s.count() == kMax64);
          break;
        }
        s.add_bucket(layout.index_of(v), 1);
        s.add_sum(v);
        if (v > l.max) s.add_above_range(1);
        m.add(i, 1);
        m.sum += v;
        if (v > l.max) ++m.above;
        if (by_cpu) {
          by_cpu->histogram.record(v);
          by_cpu->model.add(i, 1);
          by_cpu->model.sum += v;
          if (v > l.max) ++by_cpu->model.above;
        }
        if (by_cid) {
          by_cid->histogram.record(v);
          by_cid->model.add(i, 1);
          by_cid->model.sum += v;
          if (v > l.max) ++by_cid->model.above;
        }
        break;
      }
      case 1: {  // add_bucket() with any index and count; with above_range() when at the top
        const std::size_t i = in.ConsumeBool() ? in.ConsumeIntegralInRange<std::size_t>(0, last + 2)
                                               : in.ConsumeIntegral<std::size_t>();
        const std::uint64_t n = consume_count(in);
        const bool above = i == last && in.ConsumeBool();
        const std::uint64_t before = digest(s);
        const bool overflows = n > kMax64 - m.count;
        try {
          s.add_bucket(i, n);
          FUZZ_CHECK(i <= last && !overflows);
          m.add(i, n);
          if (above) {
            s.add_above_range(n);
            m.above += n;
          }
        } catch (const std::out_of_range&) {
          FUZZ_CHECK(i > last);
          FUZZ_CHECK(digest(s) == before);
        } catch (const std::overflow_error&) {
          FUZZ_CHECK(i <= last && overflows);
          FUZZ_CHECK(digest(s) == before);
        }
        break;
      }
      case 2: {
        const std::uint64_t add = in.ConsumeIntegral<std::uint64_t>();
        s.add_sum(add);
        m.sum += add;
        break;
      }
      case 3: {  // a quantile: any double; outside [0, 1] (NaN included) is refused
        const double q = consume_quantile(in);
        if (!(q >= 0.0 && q <= 1.0)) {
          bool refused = false;
          try {
            (void)s.value_at_quantile(q);
          } catch (const std::invalid_argument&) {
            refused = true;
          }
          FUZZ_CHECK_MSG(refused, "quantile %g accepted", q);
          break;
        }
        const std::uint64_t got = s.value_at_quantile(q);
        FUZZ_CHECK_MSG(got == model_quantile(m, l, q), "quantile %.17g: %llu, model %llu", q,
                       static_cast<unsigned long long>(got),
                       static_cast<unsigned long long>(model_quantile(m, l, q)));
        const double q2 = consume_quantile(in);
        if (q2 >= q && q2 <= 1.0) FUZZ_CHECK(s.value_at_quantile(q2) >= got);
        break;
      }
      case 4: {
        const std::uint64_t v = consume_value(in, l);
        FUZZ_CHECK_MSG(s.count_at_or_below(v) == model_count_at_or_below(m, l, v),
                       "count_at_or_below(%llu): %llu, model %llu",
                       static_cast<unsigned long long>(v),
                       static_cast<unsigned long long>(s.count_at_or_below(v)),
                       static_cast<unsigned long long>(model_count_at_or_below(m, l, v)));
        break;
      }
      case 5:
        check_queries(in, s, m, l);
        break;
      case 6: {  // merge(): another snapshot, itself, or one of another layout
        const std::size_t from = in.ConsumeIntegralInRange<std::size_t>(0, 3);
        const std::uint64_t before = digest(s);
        if (from == 3) {
          if (!foreign) break;
          bool refused = false;
          try {
            s.merge(*foreign);
          } catch (const std::invalid_argument&) {
            refused = true;
          }
          FUZZ_CHECK(refused);
          FUZZ_CHECK(digest(s) == before);
          break;
        }
        const model_snapshot add = models[from];  // a copy: `from` may be `which`
        const bool overflows = add.count > kMax64 - m.count;
        try {
          s.merge(snaps[from]);
          FUZZ_CHECK(!overflows);
        } catch (const std::overflow_error&) {
          FUZZ_CHECK(overflows);
          FUZZ_CHECK(digest(s) == before);
          break;
        }
        for (const auto& [i, n] : add.buckets) m.add(i, n);
        m.sum += add.sum;
        m.above += add.above;
        break;
      }
      case 7:
        s.reset();
        m = model_snapshot{};
        FUZZ_CHECK(s.layout() == layout && s.count() == 0 && s.sum() == 0 && s.above_range() == 0);
        break;
      case 8: {  // copies and moves are plain values
        const std::size_t to = in.ConsumeIntegralInRange<std::size_t>(0, 2);
        if (in.ConsumeBool()) {
          snaps[to] = s;
        } else {
          histogram_snapshot moved(s);
          snaps[to] = std::move(moved);
        }
        models[to] = m;
        break;
      }
      case 9: {  // bucket(): checked; operator[] agrees
        const std::size_t i = in.ConsumeIntegralInRange<std::size_t>(0, last + 3);
        if (i <= last) {
          FUZZ_CHECK(s.bucket(i) == m.at(i) && s[i] == m.at(i));
        } else {
          bool refused = false;
          try {
            (void)s.bucket(i);
          } catch (const std::out_of_range&) {
            refused = true;
          }
          FUZZ_CHECK(refused);
        }
        break;
      }
      case 10:
        check_equal(s, m, l);
        break;
      default: {
        const bool reset = in.ConsumeBool();
        if (by_cpu) check_histogram(*by_cpu, l, reset);
        if (by_cid) check_histogram(*by_cid, l, reset);
        break;
      }
    }
  }
  for (std::size_t i = 0; i < snaps.size(); ++i) check_equal(snaps[i], models[i], l);
  if (by_cpu) check_histogram(*by_cpu, l, false);
  if (by_cid) check_histogram(*by_cid, l, false);
  return 0;
}
