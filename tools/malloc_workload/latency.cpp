// Workload 3: single-thread malloc+free pair latency by size. For each size, `batches` timed
// batches of 1000 pairs (after a warm-up batch); a batch's time / 1000 is one sample, and the
// result is the samples' median and 99th percentile, in ns per pair.
#include <cstdlib>

#include "workload.h"

namespace percpu::workload {
namespace {

constexpr int kPairsPerBatch = 1000;
constexpr std::size_t kSizes[] = {16, 64, 256, 1024, 4096, 16384, 65536};

double time_batch(std::size_t size) {
  const double start = now_s();
  for (int i = 0; i < kPairsPerBatch; ++i) {
    void* p = std::malloc(size);
    // Keeps the pair from being folded away, and uses the object as a caller would.
    *static_cast<volatile char*>(p) = 1;
    std::free(p);
  }
  return (now_s() - start) * 1e9 / kPairsPerBatch;
}

}  // namespace

result run_latency(const params& p) {
  result res;
  res.unit = "pairs/s";
  const double start = now_s();
  double total_ns = 0;
  long pairs = 0;
  std::vector<double> samples(static_cast<std::size_t>(p.batches));
  for (std::size_t size : kSizes) {
    time_batch(size);  // warm-up: the caches fill, the size class's span is made
    for (auto& s : samples) {
      s = time_batch(size);
      total_ns += s * kPairsPerBatch;
      pairs += kPairsPerBatch;
    }
    const double p50 = percentile(samples, 50);
    res.by_size.push_back({size, {p50, percentile(samples, 99)}});
  }
  res.seconds = now_s() - start;
  res.throughput = static_cast<double>(pairs) / (total_ns * 1e-9);
  return res;
}

}  // namespace percpu::workload
