// The prometheus-cpp exporter end to end: percpu metrics registered with prometheus-cpp's own
// Exposer on 127.0.0.1, scraped over HTTP, their values read back from the text format, and the
// scrape checked by Prometheus's own parser (`promtool check metrics`, Debian's prometheus).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <percpu/prometheus_collector.h>
#include <prometheus/exposer.h>
#include <prometheus/text_serializer.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "shell.h"

namespace {

// GET http://127.0.0.1:port/metrics, the body.
std::string scrape(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return "";
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string out;
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0) {
    const std::string req = "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
    if (write(fd, req.data(), req.size()) == static_cast<ssize_t>(req.size())) {
      char buf[4096];
      ssize_t n;
      while ((n = read(fd, buf, sizeof(buf))) > 0) out.append(buf, static_cast<std::size_t>(n));
    }
  }
  close(fd);
  const std::size_t body = out.find("\r\n\r\n");
  return body == std::string::npos ? "" : out.substr(body + 4);
}

// The value of the sample whose line starts with `series` (name and labels, as written), or
// NaN when there is none.
double sample(const std::string& text, const std::string& series) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(series + " ", 0) == 0)
      return std::strtod(line.c_str() + series.size() + 1, nullptr);
  }
  return std::nan("");
}

// Prometheus's own parser on `text`: "" when it accepts it, else what promtool said. promtool
// exits 1 for a text it cannot parse and 3 for lint advice alone (a counter without "_total"),
// which a scrape may carry; PERCPU_PROMTOOL is the path CMake found.
std::string promtool_rejects(const std::string& text) {
  char path[] = "/tmp/percpu-scrape-XXXXXX";
  const int fd = mkstemp(path);
  if (fd < 0) return "mkstemp failed";
  close(fd);
  std::ofstream(path, std::ios::binary) << text;
  const auto r =
      percpu::test::shell(std::string(PERCPU_PROMTOOL) + " check metrics < " + path + " 2>&1");
  unlink(path);
  if (!WIFEXITED(r.status)) return "promtool did not run: " + r.out;
  const int code = WEXITSTATUS(r.status);
  if (code == 0 || (code == 3 && r.out.find("error") == std::string::npos)) return "";
  return "promtool exit " + std::to_string(code) + ": " + r.out;
}

TEST(PrometheusCollector, ScrapedOverHttpTheValuesMatch) {
  percpu::counter<std::int64_t> requests;
  percpu::percpu_counter<> bytes(16);
  percpu::histogram<> latency(percpu::histogram_layout(7, 10'000'000'000));
  auto collector = std::make_shared<percpu::prometheus_collector>();
  collector->add_counter("percpu_test_requests_total", "Requests served.", {{"kind", "get"}},
                         requests);
  collector->add_gauge("percpu_test_bytes_in_use", "Bytes held.", {}, bytes);
  collector->add_histogram("percpu_test_latency_seconds", "Request latency.", {{"path", "/"}},
                           latency, {1e-7, 0.000001, 5e-6, 0.00001, 0.001}, 1e-9);
  EXPECT_EQ(collector->size(), 3u);

  prometheus::Exposer exposer("127.0.0.1:0");
  exposer.RegisterCollectable(collector);
  const std::vector<int> ports = exposer.GetListeningPorts();
  ASSERT_EQ(ports.size(), 1u);

  // From several threads, so the values sit in more than one CPU's slots.
  std::vector<std::thread> workers;
  for (int t = 0; t < 4; ++t)
    workers.emplace_back([&] {
      for (int i = 0; i < 1000; ++i) {
        requests.add(1);
        bytes.add(100);
        latency.record(500);        // 0.5 us
        latency.record(5'000);      // 5 us
        latency.record(5'000'000);  // 5 ms: above every finite bound
      }
    });
  for (auto& w : workers) w.join();
  bytes.sub(1);

  const std::string text = scrape(ports[0]);
  ASSERT_FALSE(text.empty());
  EXPECT_NE(text.find("# TYPE percpu_test_requests_total counter"), std::string::npos) << text;
  EXPECT_NE(text.find("# TYPE percpu_test_bytes_in_use gauge"), std::string::npos);
  EXPECT_NE(text.find("# TYPE percpu_test_latency_seconds histogram"), std::string::npos);
  EXPECT_EQ(sample(text, "percpu_test_requests_total{kind=\"get\"}"), 4000) << text;
  EXPECT_EQ(sample(text, "percpu_test_bytes_in_use"), 399'999) << text;
  const std::string h = "percpu_test_latency_seconds";
  EXPECT_EQ(sample(text, h + "_count{path=\"/\"}"), 12000) << text;
  EXPECT_NEAR(sample(text, h + "_sum{path=\"/\"}"), 4000.0 * (500 + 5000 + 5000000) * 1e-9, 1e-9);
  EXPECT_EQ(sample(text, h + "_bucket{path=\"/\",le=\"1e-06\"}"), 4000) << text;
  // 5 us lies in the bucket 4992..5023 ns (1/128 precision), which straddles 5e-6 s: it counts
  // above that bound, as documented.
  EXPECT_EQ(sample(text, h + "_bucket{path=\"/\",le=\"5e-06\"}"), 4000) << text;
  EXPECT_EQ(sample(text, h + "_bucket{path=\"/\",le=\"1e-07\"}"), 0) << text;
  EXPECT_EQ(sample(text, h + "_bucket{path=\"/\",le=\"1e-05\"}"), 8000) << text;
  EXPECT_EQ(sample(text, h + "_bucket{path=\"/\",le=\"0.001\"}"), 8000) << text;
  EXPECT_EQ(sample(text, h + "_bucket{path=\"/\",le=\"+Inf\"}"), 12000) << text;
  EXPECT_EQ(promtool_rejects(text), "") << text;

  // A later scrape sees later records; a removed metric is gone.
  latency.record(100);  // 1e-7 s: the first bound's own bucket
  EXPECT_TRUE(collector->remove("percpu_test_requests_total", {{"kind", "get"}}));
  EXPECT_FALSE(collector->remove("percpu_test_requests_total", {{"kind", "get"}}));
  const std::string again = scrape(ports[0]);
  EXPECT_EQ(sample(again, h + "_count{path=\"/\"}"), 12001) << again;
  EXPECT_EQ(sample(again, h + "_bucket{path=\"/\",le=\"1e-07\"}"), 1) << again;
  EXPECT_EQ(again.find("percpu_test_requests_total"), std::string::npos) << again;
}

TEST(PrometheusCollector, BadRegistrationsAreRefusedAndChangeNothing) {
  percpu::counter<std::int64_t> c;
  percpu::histogram<> h;
  percpu::prometheus_collector col;
  col.add_counter("ok_total", "help", {{"a", "1"}}, c);
  EXPECT_THROW(col.add_counter("ok_total", "help", {{"a", "1"}}, c), std::invalid_argument);
  EXPECT_THROW(col.add_gauge("ok_total", "help", {{"a", "2"}}, c), std::invalid_argument);
  EXPECT_THROW(col.add_counter("ok_total", "other help", {{"a", "2"}}, c), std::invalid_argument);
  // Prometheus drops a label with an empty value: {a="1", b=""} is the series {a="1"}.
  EXPECT_THROW(col.add_counter("ok_total", "help", {{"a", "1"}, {"b", ""}}, c),
               std::invalid_argument);
  EXPECT_THROW(col.add_counter("1bad", "help", {}, c), std::invalid_argument);
  EXPECT_THROW(col.add_counter("fine", "help", {{"bad-label", "x"}}, c), std::invalid_argument);
  EXPECT_THROW(col.add_histogram("lat", "help", {{"le", "x"}}, h, {1.0}), std::invalid_argument);
  EXPECT_THROW(col.add_histogram("lat", "help", {}, h, {2.0, 1.0}), std::invalid_argument);
  EXPECT_THROW(col.add_histogram("lat", "help", {}, h, {1.0, INFINITY}), std::invalid_argument);
  EXPECT_THROW(col.add_histogram("lat", "help", {}, h, {1.0}, 0.0), std::invalid_argument);
  EXPECT_THROW(col.add_histogram("lat", "help", {}, h, {1.0}, 5e-324), std::invalid_argument);
  // Bounds as the text format writes them (16 significant digits): two that print alike or read
  // back alike, and one that prints past the largest double.
  const double top = std::numeric_limits<double>::max();
  EXPECT_THROW(col.add_histogram("lat", "help", {}, h, {0.1, std::nextafter(0.1, 1.0)}),
               std::invalid_argument);
  EXPECT_THROW(col.add_histogram("lat", "help", {}, h, {1e-11, std::nextafter(1e-11, 1.0)}),
               std::invalid_argument);
  EXPECT_THROW(col.add_histogram("lat", "help", {}, h, {top}), std::invalid_argument);
  // A histogram's series names are taken, both ways round.
  col.add_histogram("size", "help", {}, h, {1.0});
  EXPECT_THROW(col.add_counter("size_count", "help", {}, c), std::invalid_argument);
  EXPECT_THROW(col.add_histogram("size", "help", {}, h, {1.0}), std::invalid_argument);
  EXPECT_EQ(col.size(), 2u);
  EXPECT_TRUE(col.remove("size", {}));
  col.add_counter("ok_total", "help", {{"a", "2"}}, c);  // another label set of the family
  c.add(3);
  const auto families = col.Collect();
  ASSERT_EQ(families.size(), 1u);
  ASSERT_EQ(families[0].metric.size(), 2u);
  EXPECT_EQ(families[0].metric[1].counter.value, 3);
}

// Help texts and label values that would corrupt the text format are refused with nothing added;
// what is accepted (any UTF-8 label value, quotes and backslashes included) scrapes as text that
// Prometheus's parser takes, every metric of it.
TEST(PrometheusCollector, TextThatWouldBreakTheScrapeIsRefusedTheRestParses) {
  percpu::counter<std::int64_t> c;
  percpu::percpu_counter<> b(8);
  percpu::histogram<> h;
  percpu::prometheus_collector col;
  col.add_counter("kept_total", "A metric registered first.", {{"k", "v"}}, c);
  std::ostringstream before;
  prometheus::TextSerializer().Serialize(before, col.Collect());

  EXPECT_THROW(col.add_counter("x_total", "help with \\ and\nmore", {}, c), std::invalid_argument);
  EXPECT_THROW(col.add_counter("x_total", "a line\nfeed", {}, c), std::invalid_argument);
  EXPECT_THROW(col.add_counter("x_total", "back\\slash", {}, c), std::invalid_argument);
  EXPECT_THROW(col.add_gauge("x", "not UTF-8 \xc3(", {}, b), std::invalid_argument);
  EXPECT_THROW(col.add_histogram("x", "two\nlines", {}, h, {1.0, 2.0}), std::invalid_argument);
  for (const char* bad : {"\xff\xfe\xc3(", "\xc0\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80",
                          "\xe2\x82", "\x80", "ok\xf8\x88\x80\x80\x80"})
    EXPECT_THROW(col.add_counter("y_total", "help", {{"v", bad}}, c), std::invalid_argument)
        << "label value " << ::testing::PrintToString(std::string(bad));
  EXPECT_EQ(col.size(), 1u);
  std::ostringstream after;
  prometheus::TextSerializer().Serialize(after, col.Collect());
  EXPECT_EQ(after.str(), before.str());

  // Accepted: label values with the characters the format escapes, and any UTF-8.
  c.add(7);
  b.add(5);
  h.record(3);
  col.add_counter("kept_total", "A metric registered first.", {{"k", "quote \" back \\ nl \n"}}, c);
  col.add_gauge("percpu_bytes",
                "Bytes; UTF-8 help: \xc3\xa9t\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 \"q\"",
                {{"path", "/caf\xc3\xa9"}, {"empty", ""}}, b);
  col.add_histogram("percpu_size_bytes", "", {{"unit", "\xef\xbf\xbd"}}, h, {1.0, 4.0, 1e300});
  // A unit so large that _sum would print past the largest double: served as +Inf.
  col.add_histogram("percpu_huge", "", {}, h, {1.0}, std::numeric_limits<double>::max());
  EXPECT_EQ(col.size(), 5u);
  std::ostringstream text;
  prometheus::TextSerializer().Serialize(text, col.Collect());
  EXPECT_EQ(promtool_rejects(text.str()), "") << text.str();
  EXPECT_NE(text.str().find("percpu_size_bytes_count{unit=\"\xef\xbf\xbd\"} 1"), std::string::npos)
      << text.str();
}

// The checker itself: promtool refuses what the old exporter wrote (a raw line feed in a help
// text, a label value that is not UTF-8), so the test above can fail.
TEST(PrometheusCollector, PromtoolRefusesACorruptScrape) {
  EXPECT_NE(
      promtool_rejects("# HELP x_total help \\ and\nmore\n# TYPE x_total counter\nx_total 1\n"),
      "");
  EXPECT_NE(promtool_rejects("# TYPE y_total counter\ny_total{a=\"\xff\xfe\"} 1\n"), "");
  EXPECT_EQ(promtool_rejects("# HELP z_total fine\n# TYPE z_total counter\nz_total 1\n"), "");
}

}  // namespace
