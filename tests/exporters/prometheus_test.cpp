// The prometheus-cpp exporter end to end: percpu metrics registered with prometheus-cpp's own
// Exposer on 127.0.0.1, scraped over HTTP, their values read back from the text format.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <percpu/prometheus_collector.h>
#include <prometheus/exposer.h>

#include <cmath>
#include <cstdlib>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

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
  EXPECT_THROW(col.add_counter("1bad", "help", {}, c), std::invalid_argument);
  EXPECT_THROW(col.add_counter("fine", "help", {{"bad-label", "x"}}, c), std::invalid_argument);
  EXPECT_THROW(col.add_histogram("lat", "help", {{"le", "x"}}, h, {1.0}), std::invalid_argument);
  EXPECT_THROW(col.add_histogram("lat", "help", {}, h, {2.0, 1.0}), std::invalid_argument);
  EXPECT_THROW(col.add_histogram("lat", "help", {}, h, {1.0, INFINITY}), std::invalid_argument);
  EXPECT_THROW(col.add_histogram("lat", "help", {}, h, {1.0}, 0.0), std::invalid_argument);
  EXPECT_THROW(col.add_histogram("lat", "help", {}, h, {1.0}, 5e-324), std::invalid_argument);
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

}  // namespace
