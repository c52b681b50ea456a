// prometheus_collector: percpu's counters, batched counters and histograms as a prometheus-cpp
// Collectable, so a program serves them through prometheus-cpp's own Registry-free pull path
// (prometheus::Exposer::RegisterCollectable) or its push Gateway. An optional component: the
// library percpu::percpu_prometheus, built where prometheus-cpp (Debian: prometheus-cpp-dev)
// is installed; the core library does not depend on it.
#pragma once

#define PERCPU_PUBLIC_HEADER 1  // lets it include percpu/internal/

#include "percpu/internal/config.h"  // first: the C++20 check

#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "percpu/counter.h"
#include "percpu/histogram.h"
#include "percpu/percpu_counter.h"

namespace percpu {

/// A set of percpu metrics that prometheus-cpp collects at each scrape. Each metric is a name,
/// a help text, labels and the object it reads; metrics with one name form one family (one
/// type, one help text) and differ by labels.
///
/// What a scrape reads:
/// - counter<T, M>: load() (exact; O(slots)), as a Prometheus counter, or a gauge where the
///   value may fall (add_gauge).
/// - percpu_counter<M>: sum() (exact) or, with batched_read::approximate, read() (one load,
///   within error_bound()), as a counter or a gauge.
/// - histogram<M>: snapshot(), as a Prometheus histogram with the upper bounds given (in the
///   exported unit); `unit` is what one recorded unit is worth there (1e-9 to export values
///   recorded in nanoseconds as seconds). A bucket's cumulative count is
///   histogram_snapshot::count_at_or_below(bound / unit): exact where the bound falls on an
///   edge of the histogram's own buckets, else it leaves out the records of the bucket that
///   straddles it (at most the layout's precision away). _count and _sum are exact; the +Inf
///   bucket is _count. A histogram whose snapshot fails (no fence possible) is left out of that
///   scrape.
///
/// The objects must outlive their registration: remove() them (or destroy the collector)
/// first. Errors: the add_ functions throw std::invalid_argument for a name or label name that
/// Prometheus does not allow, a label value or help text that is not UTF-8, a help text that
/// holds a backslash or a line feed (prometheus-cpp writes help texts unescaped, and one such
/// line would make the whole scrape unparsable), a (name, labels) pair already present (a label
/// whose value is empty counts as absent, as Prometheus drops it), a name already used with another
/// type or help text, a name that is one of a histogram's series (h_bucket, h_count, h_sum) or a
/// histogram whose series are taken, or histogram bounds that are not finite and strictly
/// increasing as the text format writes them (16 significant digits: two bounds that print alike,
/// or one that prints past the largest double, are refused; the unit must be a normal number > 0);
/// nothing is added then. A histogram's _sum that would print past the largest double is served as
/// +Inf.
///
/// Thread safety: every member may be called from any thread, Collect() (prometheus-cpp's
/// scrape threads) concurrently with add and remove (one mutex); not async-signal-safe.
class prometheus_collector : public ::prometheus::Collectable {
 public:
  /// A metric's labels, name to value (values any valid UTF-8, quotes, backslashes and line
  /// feeds included: prometheus-cpp escapes them).
  using labels = std::map<std::string, std::string>;
  /// How a scrape reads a percpu_counter: sum() (exact, O(slots)) or read() (one load, within
  /// error_bound()).
  enum class batched_read { exact, approximate };

  /// Serves c.load() as a Prometheus counter (a value that only rises).

  template <class T, index_mode M>
  void add_counter(const std::string& name, const std::string& help, const labels& l,
                   const counter<T, M>& c) {
    add_value(name, help, l, false, [&c] { return static_cast<double>(c.load()); });
  }
  /// Serves c.load() as a gauge (a value that may fall).
  template <class T, index_mode M>
  void add_gauge(const std::string& name, const std::string& help, const labels& l,
                 const counter<T, M>& c) {
    add_value(name, help, l, true, [&c] { return static_cast<double>(c.load()); });
  }
  /// Serves a batched counter as a Prometheus counter, read as `how` says.
  template <index_mode M>
  void add_counter(const std::string& name, const std::string& help, const labels& l,
                   const percpu_counter<M>& c, batched_read how = batched_read::exact) {
    add_value(name, help, l, false, batched_value(c, how));
  }
  /// Serves a batched counter as a gauge (a budget in use, bytes held), read as `how` says.
  template <index_mode M>
  void add_gauge(const std::string& name, const std::string& help, const labels& l,
                 const percpu_counter<M>& c, batched_read how = batched_read::exact) {
    add_value(name, help, l, true, batched_value(c, how));
  }
  /// Serves h as a Prometheus histogram: `upper_bounds` in the exported unit (finite, strictly
  /// increasing; +Inf is added), `unit` what one recorded unit is worth in it. Each scrape
  /// takes h.snapshot() (a fence; see the class comment).
  template <index_mode M>
  void add_histogram(const std::string& name, const std::string& help, const labels& l,
                     histogram<M>& h, std::vector<double> upper_bounds, double unit = 1.0) {
    add_distribution(
        name, help, l, std::move(upper_bounds), unit,
        [&h](histogram_snapshot& out) { return h.snapshot_or_error(out); }, h.layout());
  }

  /// Removes the metric (name, labels); false when there is none.
  bool remove(const std::string& name, const labels& l);

  /// Number of metrics registered.
  std::size_t size() const;

  /// prometheus-cpp's scrape: one family per name, its metrics in the order added.
  std::vector<::prometheus::MetricFamily> Collect() const override;

 private:
  template <index_mode M>
  static std::function<double()> batched_value(const percpu_counter<M>& c, batched_read how) {
    if (how == batched_read::approximate) return [&c] { return static_cast<double>(c.read()); };
    return [&c] { return static_cast<double>(c.sum()); };
  }
  void add_value(const std::string& name, const std::string& help, const labels& l, bool gauge,
                 std::function<double()> read);
  void add_distribution(const std::string& name, const std::string& help, const labels& l,
                        std::vector<double> upper_bounds, double unit,
                        std::function<std::error_code(histogram_snapshot&)> snapshot,
                        const histogram_layout& layout);

  struct metric {
    std::string name, help;
    ::prometheus::MetricType type;
    labels l;
    std::function<double()> read;                                  // counters and gauges
    std::function<std::error_code(histogram_snapshot&)> snapshot;  // histograms
    histogram_layout layout;
    std::vector<double> bounds;
    double unit = 1.0;
  };
  void add(metric m);

  mutable std::mutex mutex_;
  std::vector<metric> metrics_;
};

}  // namespace percpu
