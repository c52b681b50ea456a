// prometheus_collector: the registered metrics and the scrape (percpu/prometheus_collector.h
// says the contract).
#include "percpu/prometheus_collector.h"

#include <prometheus/check_names.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <stdexcept>

namespace percpu {
namespace {

// True when `s` is well-formed UTF-8 as Unicode defines it (the check Prometheus's parser makes
// with Go's utf8.ValidString): no stray continuation byte, no truncated sequence, no overlong
// form, no surrogate (U+D800-U+DFFF), nothing above U+10FFFF.
bool valid_utf8(const std::string& s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const auto* const end = p + s.size();
  while (p < end) {
    const unsigned char c = *p++;
    if (c < 0x80) continue;
    int more;
    unsigned char lo = 0x80, hi = 0xbf;  // the range of the byte after the lead
    if (c >= 0xc2 && c <= 0xdf) {
      more = 1;
    } else if (c >= 0xe0 && c <= 0xef) {
      more = 2;
      if (c == 0xe0) lo = 0xa0;  // overlong below U+0800
      if (c == 0xed) hi = 0x9f;  // surrogates
    } else if (c >= 0xf0 && c <= 0xf4) {
      more = 3;
      if (c == 0xf0) lo = 0x90;  // overlong below U+10000
      if (c == 0xf4) hi = 0x8f;  // above U+10FFFF
    } else {
      return false;  // a continuation byte, C0/C1 (overlong) or F5-FF
    }
    if (end - p < more) return false;
    if (*p < lo || *p > hi) return false;
    for (int i = 1; i < more; ++i)
      if ((p[i] & 0xc0) != 0x80) return false;
    p += more;
  }
  return true;
}

// `v` as a scrape carries it: prometheus-cpp writes doubles with 16 significant digits, and
// Prometheus reads that text back. Near the largest double the text rounds past it and reads
// back as out of range (an unparsable scrape), and two close doubles read back as one.
double as_written(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.16g", v);
  return std::strtod(text, nullptr);
}

std::vector<::prometheus::ClientMetric::Label> to_labels(const prometheus_collector::labels& l) {
  std::vector<::prometheus::ClientMetric::Label> out;
  for (const auto& [k, v] : l) out.push_back({k, v});
  return out;
}

// True when two label sets name one series: Prometheus drops a label whose value is empty, so
// {a=""} is {}.
bool same_series(const prometheus_collector::labels& a, const prometheus_collector::labels& b) {
  auto i = a.begin(), j = b.begin();
  for (;;) {
    while (i != a.end() && i->second.empty()) ++i;
    while (j != b.end() && j->second.empty()) ++j;
    if (i == a.end() || j == b.end()) return i == a.end() && j == b.end();
    if (*i != *j) return false;
    ++i;
    ++j;
  }
}

// The records at or below `bound` (exported units) of a histogram recorded in units worth `unit`.
// A quotient within a few ulps of an integer is that integer (1e-7 / 1e-9 is 99.99999999999999).
std::uint64_t cumulative(const histogram_snapshot& s, double bound, double unit) {
  const double q = bound / unit, nearest = std::round(q);
  const double v = std::fabs(q - nearest) <= 1e-12 * std::fmax(1.0, std::fabs(nearest))
                       ? nearest
                       : std::floor(q);
  if (v < 0) return 0;
  if (v >= 18446744073709551616.0) return s.count();
  return s.count_at_or_below(static_cast<std::uint64_t>(v));
}

}  // namespace

void prometheus_collector::add_value(const std::string& name, const std::string& help,
                                     const labels& l, bool gauge, std::function<double()> read) {
  metric m{name,
           help,
           gauge ? ::prometheus::MetricType::Gauge : ::prometheus::MetricType::Counter,
           l,
           std::move(read),
           {},
           histogram_layout(0, 1),
           {},
           1.0};
  add(std::move(m));
}

void prometheus_collector::add_distribution(
    const std::string& name, const std::string& help, const labels& l,
    std::vector<double> upper_bounds, double unit,
    std::function<std::error_code(histogram_snapshot&)> snapshot, const histogram_layout& layout) {
  if (!(std::isnormal(unit) && unit > 0))
    throw std::invalid_argument(
        "percpu::prometheus_collector: the unit must be a normal, finite number > 0");
  // As written: bounds that print alike would make two buckets of one "le" value.
  for (std::size_t i = 0; i < upper_bounds.size(); ++i) {
    const double b = as_written(upper_bounds[i]);
    if (!std::isfinite(upper_bounds[i]) || !std::isfinite(b) ||
        (i > 0 && !(b > as_written(upper_bounds[i - 1]))))
      throw std::invalid_argument(
          "percpu::prometheus_collector: histogram bounds must be finite and strictly "
          "increasing as the text format writes them, to 16 significant digits (+Inf is "
          "added)");
  }
  metric m{name,
           help,
           ::prometheus::MetricType::Histogram,
           l,
           {},
           std::move(snapshot),
           layout,
           std::move(upper_bounds),
           unit};
  add(std::move(m));
}

void prometheus_collector::add(metric m) {
  if (!::prometheus::CheckMetricName(m.name))
    throw std::invalid_argument("percpu::prometheus_collector: not a metric name: '" + m.name +
                                "'");
  // prometheus-cpp writes the help text as it is (the text format wants "\\" and "\n" escaped
  // there), so a backslash or a line feed would corrupt the scrape of every metric: refused, as
  // is text Prometheus's parser rejects as not UTF-8.
  if (m.help.find_first_of("\\\n") != std::string::npos)
    throw std::invalid_argument("percpu::prometheus_collector: the help text of '" + m.name +
                                "' holds a backslash or a line feed");
  if (!valid_utf8(m.help))
    throw std::invalid_argument("percpu::prometheus_collector: the help text of '" + m.name +
                                "' is not UTF-8");
  for (const auto& [k, v] : m.l) {
    // "le" is the histogram's own bucket label; names starting "__" are Prometheus's.
    if (!::prometheus::CheckLabelName(k) || k == "le")
      throw std::invalid_argument("percpu::prometheus_collector: not a label name: '" + k + "'");
    // prometheus-cpp escapes '\\', '"' and line feeds in values; the rest is written raw.
    if (!valid_utf8(v))
      throw std::invalid_argument("percpu::prometheus_collector: the value of label '" + k +
                                  "' of '" + m.name + "' is not UTF-8");
  }
  const std::lock_guard<std::mutex> hold(mutex_);
  // A histogram's series are name_bucket, name_count and name_sum: no other family may use them.
  const auto shadows = [](const metric& h, const metric& other) {
    if (h.type != ::prometheus::MetricType::Histogram) return false;
    for (const char* suffix : {"_bucket", "_count", "_sum"})
      if (other.name == h.name + suffix) return true;
    return false;
  };
  for (const metric& o : metrics_) {
    if (shadows(o, m) || shadows(m, o))
      throw std::invalid_argument(
          "percpu::prometheus_collector: '" + m.name + "' collides with the series of histogram '" +
          (m.type == ::prometheus::MetricType::Histogram ? m.name : o.name) + "'");
    if (o.name != m.name) continue;
    if (o.type != m.type || o.help != m.help)
      throw std::invalid_argument("percpu::prometheus_collector: '" + m.name +
                                  "' is registered with another type or help text");
    if (same_series(o.l, m.l))
      throw std::invalid_argument("percpu::prometheus_collector: '" + m.name +
                                  "' with these labels is registered already");
  }
  metrics_.push_back(std::move(m));
}

bool prometheus_collector::remove(const std::string& name, const labels& l) {
  const std::lock_guard<std::mutex> hold(mutex_);
  for (auto it = metrics_.begin(); it != metrics_.end(); ++it) {
    if (it->name == name && it->l == l) {
      metrics_.erase(it);
      return true;
    }
  }
  return false;
}

std::size_t prometheus_collector::size() const {
  const std::lock_guard<std::mutex> hold(mutex_);
  return metrics_.size();
}

std::vector<::prometheus::MetricFamily> prometheus_collector::Collect() const {
  const std::lock_guard<std::mutex> hold(mutex_);
  std::vector<::prometheus::MetricFamily> families;
  std::map<std::string, std::size_t> family_of;
  for (const metric& m : metrics_) {
    ::prometheus::ClientMetric cm;
    cm.label = to_labels(m.l);
    if (m.type == ::prometheus::MetricType::Histogram) {
      histogram_snapshot s(m.layout);
      if (m.snapshot(s)) continue;  // no fence possible: left out of this scrape
      cm.histogram.sample_count = s.count();
      // A sum the text cannot carry (past the largest double once written) is +Inf.
      const double sum = static_cast<double>(s.sum()) * m.unit;
      cm.histogram.sample_sum =
          std::isfinite(as_written(sum)) ? sum : std::numeric_limits<double>::infinity();
      for (const double b : m.bounds) cm.histogram.bucket.push_back({cumulative(s, b, m.unit), b});
      cm.histogram.bucket.push_back({s.count(), std::numeric_limits<double>::infinity()});
    } else if (m.type == ::prometheus::MetricType::Counter) {
      cm.counter.value = m.read();
    } else {
      cm.gauge.value = m.read();
    }
    auto [it, fresh] = family_of.try_emplace(m.name, families.size());
    if (fresh) families.push_back({m.name, m.help, m.type, {}});
    families[it->second].metric.push_back(std::move(cm));
  }
  return families;
}

}  // namespace percpu
