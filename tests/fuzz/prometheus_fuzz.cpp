// Fuzz target: prometheus_collector's registration and its scrape, serialized by prometheus-cpp's
// TextSerializer.
//
// The input is a sequence of registrations (counters, gauges, batched counters, histograms)
// with names, label names and values, help texts, bounds and units from a dictionary of edge
// cases or raw bytes; removals; updates of the values; scrapes. Each registration must either
// throw std::invalid_argument and change nothing (size() and the scrape's text as before), or
// succeed; which of the two is checked against the header's rules, written here as a model. The
// text of every scrape must pass a validator of the text exposition format 0.0.4, written here
// and strict (names, escapes, UTF-8, one TYPE and HELP per family before its samples, no
// duplicate series, numbers Go's ParseFloat reads, histogram buckets whose le values read back
// distinct and ascending, ending at +Inf with _count's value), and hold what the model
// registered, with values matching.
//
// Prometheus's own parser is the final judge: with PERCPU_FUZZ_SCRAPES=<directory> in the
// environment, the target judges no scrape itself and writes each input's last one to a file
// there (named after the input's hash), for `promtool check metrics` (scripts/run-fuzz.sh does
// so for the corpus after its run).
#include <fuzzer/FuzzedDataProvider.h>
#include <percpu/prometheus_collector.h>
#include <prometheus/text_serializer.h>

#include <cerrno>
#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_check.h"

namespace {

using labels = percpu::prometheus_collector::labels;

const char* g_scrapes = nullptr;  // PERCPU_FUZZ_SCRAPES

// ---- Text rules -----------------------------------------------------------------------------

// Well-formed UTF-8 as Unicode defines it (Go's utf8.ValidString): each sequence decoded, then
// refused when overlong, a surrogate or above U+10FFFF.
bool valid_utf8(std::string_view s) {
  static constexpr std::uint32_t kLeast[] = {0, 0x80, 0x800, 0x10000};  // by continuation bytes
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    std::size_t n = 0;
    std::uint32_t cp = c;
    if (c >= 0x80) {
      if ((c & 0xe0) == 0xc0) {
        n = 1, cp = c & 0x1f;
      } else if ((c & 0xf0) == 0xe0) {
        n = 2, cp = c & 0x0f;
      } else if ((c & 0xf8) == 0xf0) {
        n = 3, cp = c & 0x07;
      } else {
        return false;
      }
      if (s.size() - i <= n) return false;
      for (std::size_t k = 1; k <= n; ++k) {
        const auto d = static_cast<unsigned char>(s[i + k]);
        if ((d & 0xc0) != 0x80) return false;
        cp = (cp << 6) | (d & 0x3f);
      }
      if (cp < kLeast[n] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
    }
    i += n + 1;
  }
  return true;
}

bool metric_name_syntax(std::string_view s) {
  if (s.empty()) return false;
  for (std::size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    const bool letter = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
    if (!letter && !(i > 0 && c >= '0' && c <= '9')) return false;
  }
  return true;
}

bool label_name_syntax(std::string_view s) {
  if (s.empty()) return false;
  for (std::size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    const bool letter = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
    if (!letter && !(i > 0 && c >= '0' && c <= '9')) return false;
  }
  return true;
}

bool reserved(std::string_view s) {
  return s.size() >= 2 && s[0] == '_' && s[1] == '_';
}

// ---- The validator --------------------------------------------------------------------------

struct sample {
  std::string name;
  std::map<std::string, std::string> labels;  // le included
  std::string value_text;
  double value;
};

struct family {
  std::string name, type, help;
  bool has_help = false;
  std::vector<sample> samples;
};

[[noreturn]] void invalid(const std::string& text, std::size_t line, const char* why) {
  std::fprintf(stderr, "prometheus_fuzz: invalid scrape, line %zu: %s\n---\n%s---\n", line, why,
               text.c_str());
  std::abort();
}

// A sample value as Go's strconv.ParseFloat reads the text format's: a decimal float, or
// Inf/NaN (any case, Inf with a sign).
std::optional<double> parse_value(const std::string& s) {
  std::string lower;
  for (char c : s) lower += static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  if (lower == "+inf" || lower == "inf") return std::numeric_limits<double>::infinity();
  if (lower == "-inf") return -std::numeric_limits<double>::infinity();
  if (lower == "nan") return std::numeric_limits<double>::quiet_NaN();
  std::size_t i = 0;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
  std::size_t digits = 0;
  while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i, ++digits;
  if (i < s.size() && s[i] == '.') {
    ++i;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i, ++digits;
  }
  if (digits == 0) return std::nullopt;
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
    std::size_t exp = 0;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i, ++exp;
    if (exp == 0) return std::nullopt;
  }
  if (i != s.size()) return std::nullopt;
  // Go's ParseFloat refuses a number beyond the largest double (ERANGE), as Prometheus then does.
  errno = 0;
  const double v = std::strtod(s.c_str(), nullptr);
  if (std::isinf(v) && errno == ERANGE) return std::nullopt;
  return v;
}

bool whole_count(double v) {
  return v >= 0 && v == std::floor(v) && std::isfinite(v);
}

// Parses and checks the whole text; returns its families.
std::vector<family> validate(const std::string& text) {
  std::vector<family> families;
  std::map<std::string, std::size_t> index;  // family name -> families[i]
  std::set<std::string> series;              // name + labels, each once
  if (!text.empty() && text.back() != '\n') invalid(text, 0, "no final line feed");
  std::size_t line_no = 0;
  for (std::size_t at = 0; at < text.size();) {
    const std::size_t end = text.find('\n', at);
    const std::string line = text.substr(at, end - at);
    at = end + 1;
    ++line_no;
    if (line.empty()) continue;
    if (line[0] == '#') {
      if (!valid_utf8(line)) invalid(text, line_no, "a comment that is not UTF-8");
      const bool help = line.rfind("# HELP ", 0) == 0, type = line.rfind("# TYPE ", 0) == 0;
      if (!help && !type) continue;  // another comment
      const std::size_t name_end = line.find(' ', 7);
      const std::string name =
          line.substr(7, name_end == std::string::npos ? name_end : name_end - 7);
      const std::string rest = name_end == std::string::npos ? "" : line.substr(name_end + 1);
      if (!metric_name_syntax(name)) invalid(text, line_no, "HELP or TYPE of a bad name");
      auto [it, fresh] = index.try_emplace(name, families.size());
      if (fresh) {
        families.push_back({name, "", "", false, {}});
      } else if (it->second != families.size() - 1) {
        invalid(text, line_no, "a family's lines are not together");
      }
      family& f = families[it->second];
      if (!f.samples.empty()) invalid(text, line_no, "HELP or TYPE after the family's samples");
      if (help) {
        if (f.has_help) invalid(text, line_no, "a second HELP");
        for (std::size_t i = 0; i < rest.size(); ++i) {
          if (rest[i] != '\\') continue;
          if (i + 1 == rest.size() || (rest[i + 1] != '\\' && rest[i + 1] != 'n'))
            invalid(text, line_no, "HELP escapes only \\\\ and \\n");
          ++i;
        }
        f.help = rest;
        f.has_help = true;
      } else {
        if (!f.type.empty()) invalid(text, line_no, "a second TYPE");
        if (rest != "counter" && rest != "gauge" && rest != "histogram" && rest != "summary" &&
            rest != "untyped")
          invalid(text, line_no, "an unknown TYPE");
        f.type = rest;
      }
      continue;
    }
    // A sample: name, labels, value.
    sample s;
    std::size_t i = 0;
    while (i < line.size() && line[i] != '{' && line[i] != ' ') ++i;
    s.name = line.substr(0, i);
    if (!metric_name_syntax(s.name)) invalid(text, line_no, "a sample's name");
    if (i < line.size() && line[i] == '{') {
      ++i;
      while (i < line.size() && line[i] != '}') {
        std::size_t eq = line.find('=', i);
        if (eq == std::string::npos) invalid(text, line_no, "a label without '='");
        const std::string lname = line.substr(i, eq - i);
        if (!label_name_syntax(lname) || lname == "__name__")
          invalid(text, line_no, "a bad label name");
        if (eq + 1 >= line.size() || line[eq + 1] != '"')
          invalid(text, line_no, "a label value without quotes");
        std::string value;
        std::size_t k = eq + 2;
        for (;; ++k) {
          if (k >= line.size()) invalid(text, line_no, "an unterminated label value");
          if (line[k] == '"') break;
          if (line[k] == '\\') {
            ++k;
            if (k >= line.size()) invalid(text, line_no, "an unterminated label value");
            if (line[k] == '\\' || line[k] == '"')
              value += line[k];
            else if (line[k] == 'n')
              value += '\n';
            else
              invalid(text, line_no, "a label value escapes only \\\\, \\\" and \\n");
          } else {
            value += line[k];
          }
        }
        if (!valid_utf8(value)) invalid(text, line_no, "a label value that is not UTF-8");
        if (!s.labels.emplace(lname, value).second)
          invalid(text, line_no, "a label twice in a sample");
        i = k + 1;
        if (i < line.size() && line[i] == ',')
          ++i;
        else if (i >= line.size() || line[i] != '}')
          invalid(text, line_no, "labels not separated by ','");
      }
      if (i >= line.size()) invalid(text, line_no, "labels without '}'");
      ++i;
    }
    if (i >= line.size() || line[i] != ' ') invalid(text, line_no, "no blank before the value");
    const std::string value_and_time = line.substr(i + 1);
    const std::size_t blank = value_and_time.find(' ');
    s.value_text = value_and_time.substr(0, blank);
    if (blank != std::string::npos)
      invalid(text, line_no, "a timestamp (prometheus-cpp writes none)");
    const std::optional<double> v = parse_value(s.value_text);
    if (!v) invalid(text, line_no, "a value that is not a float");
    s.value = *v;
    // Its family: the one whose lines these are.
    if (families.empty()) invalid(text, line_no, "a sample without TYPE");
    family& f = families.back();
    const std::string& n = s.name;
    const bool own = n == f.name;
    const bool part = n == f.name + "_bucket" || n == f.name + "_count" || n == f.name + "_sum";
    if (f.type.empty()) invalid(text, line_no, "a sample before its family's TYPE");
    if (f.type == "histogram") {
      if (!part) invalid(text, line_no, "a histogram's sample named otherwise");
      const bool bucket = n == f.name + "_bucket";
      if (bucket != (s.labels.count("le") == 1))
        invalid(text, line_no, "le on a histogram's _bucket samples, and only there");
      if (n != f.name + "_sum" && !whole_count(s.value))
        invalid(text, line_no, "a histogram count that is not a whole number");
    } else {
      if (!own) invalid(text, line_no, "a sample of another name than its family's");
      if (s.labels.count("le") != 0) invalid(text, line_no, "le outside a histogram");
    }
    if (index.count(n) != 0 && n != f.name)
      invalid(text, line_no, "a histogram series with another family's name");
    std::string key = n + "{";
    for (const auto& [k, val] : s.labels) key += k + "=\"" + val + "\"\x01";
    if (!series.insert(key).second) invalid(text, line_no, "a series twice");
    f.samples.push_back(std::move(s));
  }
  // Each histogram, series by series: buckets with distinct le ascending to +Inf, counts not
  // decreasing, +Inf's count the _count, one _count and one _sum.
  for (const family& f : families) {
    if (f.type != "histogram") continue;
    struct parts {
      std::vector<std::pair<std::string, double>> buckets;  // le text, count
      int counts = 0, sums = 0;
      double count = 0;
    };
    std::map<std::map<std::string, std::string>, parts> by_series;
    for (const sample& s : f.samples) {
      std::map<std::string, std::string> key = s.labels;
      key.erase("le");
      parts& p = by_series[key];
      if (s.name == f.name + "_bucket") {
        p.buckets.push_back({s.labels.at("le"), s.value});
      } else if (s.name == f.name + "_count") {
        ++p.counts;
        p.count = s.value;
      } else {
        ++p.sums;
      }
    }
    for (const auto& [key, p] : by_series) {
      if (p.counts != 1 || p.sums != 1)
        invalid(text, 0, "a histogram without one _count, one _sum");
      if (p.buckets.empty() || p.buckets.back().first != "+Inf")
        invalid(text, 0, "a histogram whose last bucket is not le=\"+Inf\"");
      if (p.buckets.back().second != p.count) invalid(text, 0, "+Inf's count is not _count");
      std::set<std::string> les;
      for (std::size_t i = 0; i < p.buckets.size(); ++i) {
        const std::optional<double> le = parse_value(p.buckets[i].first);
        if (!le || std::isnan(*le)) invalid(text, 0, "an le that is not a float Prometheus reads");
        if (!les.insert(p.buckets[i].first).second) invalid(text, 0, "an le twice");
        if (i > 0) {
          const double prev = *parse_value(p.buckets[i - 1].first);
          if (!(*le > prev)) invalid(text, 0, "buckets not in ascending le");
          if (p.buckets[i].second < p.buckets[i - 1].second)
            invalid(text, 0, "a bucket's count below the one before");
        }
      }
    }
  }
  return families;
}

// ---- The model of the registrations -----------------------------------------------------------

enum class kind { counter, gauge, histogram };

struct metric {
  std::string name, help;
  kind k;
  labels l;
  int object;  // which counter, batched counter or histogram
  bool batched = false, approximate = false;
  std::vector<double> bounds;
  double unit = 1;
};

struct objects {
  percpu::counter<std::int64_t> counters[2];
  percpu::percpu_counter<> batched[2]{percpu::percpu_counter<>(0), percpu::percpu_counter<>(16)};
  std::unique_ptr<percpu::histogram<>> histograms[2];
  std::vector<std::uint64_t> records[2];  // each histogram's
  std::int64_t counter_values[2] = {}, batched_values[2] = {};
};

// What the header says of a registration: refused (std::invalid_argument) or not. nullopt
// where the model has no opinion (bounds that differ but print alike, see below).
std::optional<bool> refused(const std::vector<metric>& model, const metric& m) {
  if (!metric_name_syntax(m.name) || reserved(m.name)) return true;
  if (m.help.find_first_of("\\\n") != std::string::npos || !valid_utf8(m.help)) return true;
  for (const auto& [k, v] : m.l)
    if (!label_name_syntax(k) || reserved(k) || k == "le" || !valid_utf8(v)) return true;
  if (m.k == kind::histogram) {
    if (!(std::isnormal(m.unit) && m.unit > 0)) return true;
    for (std::size_t i = 0; i < m.bounds.size(); ++i)
      if (!std::isfinite(m.bounds[i]) || (i > 0 && !(m.bounds[i] > m.bounds[i - 1]))) return true;
  }
  const auto shadows = [](const metric& h, const metric& o) {
    return h.k == kind::histogram && (o.name == h.name + "_bucket" || o.name == h.name + "_count" ||
                                      o.name == h.name + "_sum");
  };
  const auto type = [](kind k) { return k == kind::gauge ? 1 : k == kind::histogram ? 2 : 0; };
  for (const metric& o : model) {
    if (shadows(o, m) || shadows(m, o)) return true;
    if (o.name != m.name) continue;
    if (type(o.k) != type(m.k) || o.help != m.help) return true;
    // One series: Prometheus drops a label whose value is empty.
    const auto named = [](const labels& l) {
      labels out;
      for (const auto& [k, v] : l)
        if (!v.empty()) out.emplace(k, v);
      return out;
    };
    if (named(o.l) == named(m.l)) return true;
  }
  return false;
}

// The bounds as prometheus-cpp 1.0.1 writes them (16 significant digits): two that differ
// may print alike, which makes a scrape with an le twice.
std::string as_printed(double v) {
  std::ostringstream out;
  prometheus::MetricFamily f{"x", "", prometheus::MetricType::Gauge, {}};
  prometheus::ClientMetric c;
  c.gauge.value = v;
  f.metric.push_back(c);
  prometheus::TextSerializer().Serialize(out, {f});
  const std::string s = out.str();
  const std::size_t blank = s.rfind(' ');
  return s.substr(blank + 1, s.size() - blank - 2);
}

// True when the bounds, printed and read back, are still finite and strictly increasing (16
// digits tell neighbouring doubles apart only most of the time, and round the largest ones
// beyond the largest double).
bool survive_printing(const std::vector<double>& bounds) {
  double previous = -std::numeric_limits<double>::infinity();
  for (double b : bounds) {
    const std::optional<double> back = parse_value(as_printed(b));
    if (!back || !std::isfinite(*back) || !(*back > previous)) return false;
    previous = *back;
  }
  return true;
}

// ---- The input ------------------------------------------------------------------------------

std::string consume_name(FuzzedDataProvider& in) {
  static const char* const kNames[] = {
      "a",         "a_total", "h",   "h_bucket", "h_count", "h_sum", "h_bucket_bucket",
      "x:y",       "_",       ":",   "9a",       "",        "__x",   "a-b",
      "a\xc3\xa9", "le",      "A_b", "b",        "g",       "h2",    "h2_sum"};
  if (in.ConsumeIntegralInRange<int>(0, 7) != 0)
    return kNames[in.ConsumeIntegralInRange<std::size_t>(0, std::size(kNames) - 1)];
  return in.ConsumeRandomLengthString(16);
}

std::string consume_text(FuzzedDataProvider& in) {
  static const char* const kTexts[] = {
      "",         "Requests.",         "v",    "\"",       "\\",           "\n",
      "a\\nb",    "\xc3\xa9t\xc3\xa9", "\xff", "\xc0\x80", "\xed\xa0\x80", "\xf4\x90\x80\x80",
      "\xe2\x82", "a\"b\\c\nd",        "\r",   "}",        ",x=\"y\"",     " # HELP x y"};
  if (in.ConsumeIntegralInRange<int>(0, 3) != 0)
    return kTexts[in.ConsumeIntegralInRange<std::size_t>(0, std::size(kTexts) - 1)];
  return in.ConsumeRandomLengthString(24);
}

labels consume_labels(FuzzedDataProvider& in) {
  static const char* const kLabels[] = {"a", "b", "le", "__a", "_",      "quantile",
                                        "9", "",  "A",  "a:b", "method", "__name__"};
  labels l;
  const int n = in.ConsumeIntegralInRange<int>(0, 3);
  for (int i = 0; i < n; ++i) {
    std::string k = in.ConsumeIntegralInRange<int>(0, 5) != 0
                        ? kLabels[in.ConsumeIntegralInRange<std::size_t>(0, std::size(kLabels) - 1)]
                        : in.ConsumeRandomLengthString(8);
    l[k] = consume_text(in);
  }
  return l;
}

double consume_bound(FuzzedDataProvider& in, double previous) {
  switch (in.ConsumeIntegralInRange<int>(0, 7)) {
    case 0:
      return std::nextafter(previous, std::numeric_limits<double>::infinity());
    case 1:
      return previous + in.ConsumeIntegralInRange<int>(-1, 100);
    case 2:
      return std::pow(10.0, in.ConsumeIntegralInRange<int>(-12, 20));
    case 3:
      return in.ConsumeIntegralInRange<int>(-2, 5000);
    case 4:
      return previous * (1 + 1e-15 * in.ConsumeIntegralInRange<int>(0, 20));
    case 5: {
      static const double kOdd[] = {std::numeric_limits<double>::infinity(),
                                    -std::numeric_limits<double>::infinity(),
                                    std::numeric_limits<double>::quiet_NaN(),
                                    -0.0,
                                    std::numeric_limits<double>::denorm_min(),
                                    std::numeric_limits<double>::max(),
                                    1.8446744073709552e19,
                                    0.1};
      return kOdd[in.ConsumeIntegralInRange<std::size_t>(0, std::size(kOdd) - 1)];
    }
    default:
      return in.ConsumeFloatingPoint<double>();
  }
}

double consume_unit(FuzzedDataProvider& in) {
  static const double kUnits[] = {1.0,
                                  1e-9,
                                  1e-6,
                                  1e-3,
                                  1000.0,
                                  0.0,
                                  -1.0,
                                  std::numeric_limits<double>::quiet_NaN(),
                                  std::numeric_limits<double>::infinity(),
                                  std::numeric_limits<double>::denorm_min(),
                                  std::numeric_limits<double>::min(),
                                  std::numeric_limits<double>::max(),
                                  1e300};
  if (in.ConsumeIntegralInRange<int>(0, 3) != 0)
    return kUnits[in.ConsumeIntegralInRange<std::size_t>(0, std::size(kUnits) - 1)];
  return in.ConsumeFloatingPoint<double>();
}

std::string scrape(const percpu::prometheus_collector& c) {
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, c.Collect());
  return out.str();
}

// The scrape against the model: every metric's series with its value.
void check_against_model(const std::string& text, const std::vector<family>& families,
                         const std::vector<metric>& model, objects& o) {
  std::map<std::string, const family*> by_name;
  for (const family& f : families) by_name[f.name] = &f;
  std::set<std::string> names;
  for (const metric& m : model) names.insert(m.name);
  FUZZ_CHECK_MSG(by_name.size() == names.size(), "%zu families for %zu names", by_name.size(),
                 names.size());
  for (const metric& m : model) {
    const auto it = by_name.find(m.name);
    FUZZ_CHECK_MSG(it != by_name.end(), "'%s' missing", m.name.c_str());
    const family& f = *it->second;
    FUZZ_CHECK(f.type == (m.k == kind::counter ? "counter"
                          : m.k == kind::gauge ? "gauge"
                                               : "histogram"));
    FUZZ_CHECK(f.has_help == !m.help.empty());
    if (f.has_help) FUZZ_CHECK(f.help == m.help);
    const auto find = [&](const std::string& name, const char* le) -> const sample* {
      for (const sample& s : f.samples) {
        if (s.name != name) continue;
        labels l = s.labels;
        const auto at = l.find("le");
        if ((le != nullptr) != (at != l.end())) continue;
        if (le != nullptr && at->second != le) continue;
        if (le != nullptr) l.erase(at);
        if (l == m.l) return &s;
      }
      return nullptr;
    };
    if (m.k != kind::histogram) {
      const sample* s = find(m.name, nullptr);
      FUZZ_CHECK_MSG(s != nullptr, "'%s' has no sample with its labels", m.name.c_str());
      const double expected =
          static_cast<double>(m.batched ? o.batched_values[m.object] : o.counter_values[m.object]);
      const double slack = m.approximate ? o.batched[m.object].error_bound() : 0.0;
      FUZZ_CHECK_MSG(std::fabs(s->value - expected) <= slack + 1e-15 * std::fabs(expected),
                     "'%s': %s, expected %.17g", m.name.c_str(), s->value_text.c_str(), expected);
      continue;
    }
    const std::vector<std::uint64_t>& records = o.records[m.object];
    const percpu::histogram_layout& layout = o.histograms[m.object]->layout();
    const sample* count = find(m.name + "_count", nullptr);
    const sample* sum = find(m.name + "_sum", nullptr);
    FUZZ_CHECK(count != nullptr && sum != nullptr);
    FUZZ_CHECK(count->value == static_cast<double>(records.size()));
    std::uint64_t total = 0;
    for (std::uint64_t v : records) total += v;
    const double expected_sum = static_cast<double>(total) * m.unit;
    FUZZ_CHECK_MSG(sum->value == expected_sum ||
                       std::fabs(sum->value - expected_sum) <= 1e-15 * std::fabs(expected_sum),
                   "'%s_sum': %s, expected %.17g", m.name.c_str(), sum->value_text.c_str(),
                   expected_sum);
    // Each bound's bucket counts the records whose bucket lies wholly at or below it, give or
    // take the rounding of bound / unit: at least those wholly below it by a margin, at most
    // those starting at or below it (above-range records: only where bound / unit >= 2^64).
    for (const double b : m.bounds) {
      const sample* s = find(m.name + "_bucket", as_printed(b).c_str());
      FUZZ_CHECK_MSG(s != nullptr, "'%s' has no bucket le=\"%s\"", m.name.c_str(),
                     as_printed(b).c_str());
      const double q = b / m.unit;
      std::uint64_t low = 0, high = 0;
      for (std::uint64_t v : records) {
        const std::size_t i = layout.index_of(v);
        const double top = v > layout.max_value() ? 18446744073709551616.0
                                                  : static_cast<double>(layout.highest(i));
        const double bottom =
            v > layout.max_value() ? 18446744073709551616.0 : static_cast<double>(layout.lowest(i));
        if (top < q * (1 - 1e-9) - 1) ++low;
        if (bottom <= q * (1 + 1e-9) + 1) ++high;
      }
      FUZZ_CHECK_MSG(s->value >= static_cast<double>(low) && s->value <= static_cast<double>(high),
                     "'%s' le=%s: %s, expected %" PRIu64 "..%" PRIu64 "\n%s", m.name.c_str(),
                     as_printed(b).c_str(), s->value_text.c_str(), low, high, text.c_str());
    }
  }
}

void dump(const std::uint8_t* data, std::size_t size, const std::string& text) {
  std::uint64_t h = 1469598103934665603ull;  // FNV-1a of the input
  for (std::size_t i = 0; i < size; ++i) h = (h ^ data[i]) * 1099511628211ull;
  const std::string path = std::string(g_scrapes) + "/" + std::to_string(h) + ".prom";
  FILE* f = std::fopen(path.c_str(), "w");
  FUZZ_CHECK_MSG(f != nullptr, "cannot write %s: %s", path.c_str(), std::strerror(errno));
  std::fwrite(text.data(), 1, text.size(), f);
  std::fclose(f);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  g_scrapes = std::getenv("PERCPU_FUZZ_SCRAPES");
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzedDataProvider in(data, size);
  objects o;
  for (int i = 0; i < 2; ++i) {
    static const percpu::histogram_layout kLayouts[] = {
        percpu::histogram_layout(), percpu::histogram_layout(0, 1),
        percpu::histogram_layout(3, 1000), percpu::histogram_layout(10, std::uint64_t{1} << 40)};
    o.histograms[i] = std::make_unique<percpu::histogram<>>(
        kLayouts[in.ConsumeIntegralInRange<std::size_t>(0, std::size(kLayouts) - 1)]);
  }
  // After the objects: destroyed first, as the header asks.
  percpu::prometheus_collector collector;
  std::vector<metric> model;
  std::string text = scrape(collector);
  FUZZ_CHECK(text.empty());

  for (int step = 0; step < 24 && in.remaining_bytes() > 0; ++step) {
    const int op = in.ConsumeIntegralInRange<int>(0, 9);
    if (op <= 4) {  // a registration
      metric m;
      m.name = consume_name(in);
      m.help = in.ConsumeBool() ? std::string("Help.") : consume_text(in);
      m.l = consume_labels(in);
      m.object = in.ConsumeIntegralInRange<int>(0, 1);
      m.k = op == 4 ? kind::histogram : op % 2 == 0 ? kind::counter : kind::gauge;
      m.batched = op >= 2 && op <= 3;
      m.approximate = m.batched && in.ConsumeBool();
      if (m.k == kind::histogram) {
        const int n = in.ConsumeIntegralInRange<int>(0, 6);
        double previous = in.ConsumeIntegralInRange<int>(0, 10);
        for (int i = 0; i < n; ++i) m.bounds.push_back(previous = consume_bound(in, previous));
        m.unit = consume_unit(in);
      }
      std::optional<bool> expect_refused = refused(model, m);
      // Bounds that are finite and increasing but do not read back so once printed: the
      // header has no rule for them, the validator refuses a scrape that shows them.
      if (expect_refused == false && m.k == kind::histogram && !survive_printing(m.bounds))
        expect_refused.reset();
      const std::size_t before = collector.size();
      bool threw = false;
      try {
        const auto how = m.approximate ? percpu::prometheus_collector::batched_read::approximate
                                       : percpu::prometheus_collector::batched_read::exact;
        switch (op) {
          case 0:
            collector.add_counter(m.name, m.help, m.l, o.counters[m.object]);
            break;
          case 1:
            collector.add_gauge(m.name, m.help, m.l, o.counters[m.object]);
            break;
          case 2:
            collector.add_counter(m.name, m.help, m.l, o.batched[m.object], how);
            break;
          case 3:
            collector.add_gauge(m.name, m.help, m.l, o.batched[m.object], how);
            break;
          default:
            collector.add_histogram(m.name, m.help, m.l, *o.histograms[m.object], m.bounds, m.unit);
            break;
        }
      } catch (const std::invalid_argument&) {
        threw = true;
      }
      if (expect_refused && g_scrapes == nullptr)
        FUZZ_CHECK_MSG(threw == *expect_refused, "'%s' (help '%s', %zu labels): %s", m.name.c_str(),
                       m.help.c_str(), m.l.size(), threw ? "refused" : "accepted");
      if (threw) {
        FUZZ_CHECK(collector.size() == before);
        FUZZ_CHECK_MSG(scrape(collector) == text, "a refused registration changed the scrape");
        continue;
      }
      FUZZ_CHECK(collector.size() == before + 1);
      model.push_back(std::move(m));
    } else if (op == 5) {  // remove: a registered metric, or anything
      std::string name;
      labels l;
      if (!model.empty() && in.ConsumeBool()) {
        const metric& m = model[in.ConsumeIntegralInRange<std::size_t>(0, model.size() - 1)];
        name = m.name;
        l = m.l;
      } else {
        name = consume_name(in);
        l = consume_labels(in);
      }
      std::size_t found = model.size();
      for (std::size_t i = 0; i < model.size(); ++i)
        if (model[i].name == name && model[i].l == l) found = i;
      FUZZ_CHECK(collector.remove(name, l) == (found != model.size()));
      if (found != model.size()) model.erase(model.begin() + static_cast<std::ptrdiff_t>(found));
      FUZZ_CHECK(collector.size() == model.size());
    } else if (op == 6) {  // new values
      const int i = in.ConsumeIntegralInRange<int>(0, 1);
      const std::int64_t n = in.ConsumeIntegralInRange<std::int64_t>(-1000000, 1000000000);
      if (in.ConsumeBool()) {
        o.counters[i].add(n);
        o.counter_values[i] += n;
      } else {
        o.batched[i].add(n);
        o.batched_values[i] += n;
      }
    } else if (op == 7) {
      const int i = in.ConsumeIntegralInRange<int>(0, 1);
      const std::uint64_t v = in.ConsumeBool() ? in.ConsumeIntegralInRange<std::uint64_t>(0, 5000)
                                               : in.ConsumeIntegral<std::uint64_t>();
      o.histograms[i]->record(v);
      if (o.records[i].size() < 64) {
        o.records[i].push_back(v);
      } else {  // the model stays small: start again
        o.histograms[i]->reset();
        o.records[i].clear();
      }
    }
    text = scrape(collector);
    if (g_scrapes == nullptr) check_against_model(text, validate(text), model, o);
  }
  if (g_scrapes != nullptr && !text.empty()) dump(data, size, text);
  return 0;
}
