// Workloads 5-7, large blocks (above every allocator's small sizes), as everyday programs make
// them:
//  - large-churn: `rounds` times, malloc 1 MiB, write all of it, free it (a buffer per request);
//  - large-realloc: `rounds` times, one buffer grown by realloc in 4 KiB steps to 16 MiB, each
//    step's bytes written and the previous step's checked (a growing string or vector);
//  - large-live: `rounds` times, 10,000 blocks of 300 KiB held at once (the first byte of each
//    written), then freed (a cache of large records).
// Each exits with status 3 and a message when a block's contents changed or malloc failed.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "workload.h"

namespace percpu::workload {
namespace {

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "percpu-malloc-workload: %s\n", what);
  std::exit(3);
}

}  // namespace

result run_large_churn(const params& p) {
  constexpr std::size_t kBytes = std::size_t{1} << 20;
  const double start = now_s();
  for (long i = 0; i < p.rounds; ++i) {
    auto* b = static_cast<unsigned char*>(std::malloc(kBytes));
    if (b == nullptr) fail("large-churn: malloc(1 MiB) failed");
    std::memset(b, static_cast<int>(i), kBytes);
    asm volatile("" : : "r"(b) : "memory");  // used: the pair must not be folded away
    if (b[kBytes - 1] != static_cast<unsigned char>(i)) fail("large-churn: block changed");
    std::free(b);
  }
  result res;
  res.seconds = now_s() - start;
  res.unit = "blocks/s";
  res.throughput = static_cast<double>(p.rounds) / res.seconds;
  return res;
}

result run_large_realloc(const params& p) {
  constexpr std::size_t kStep = 4096, kFinal = std::size_t{16} << 20;
  const double start = now_s();
  for (long i = 0; i < p.rounds; ++i) {
    unsigned char* b = nullptr;
    for (std::size_t size = 0; size < kFinal; size += kStep) {
      auto* q = static_cast<unsigned char*>(std::realloc(b, size + kStep));
      if (q == nullptr) fail("large-realloc: realloc failed");
      if (size >= kStep && q[size - kStep] != static_cast<unsigned char>(size / kStep - 1))
        fail("large-realloc: contents lost in a move");
      std::memset(q + size, static_cast<int>(size / kStep), kStep);
      b = q;
    }
    std::free(b);
  }
  result res;
  res.seconds = now_s() - start;
  res.unit = "steps/s";
  res.throughput = static_cast<double>(p.rounds) * (kFinal / kStep) / res.seconds;
  return res;
}

result run_large_live(const params& p) {
  constexpr std::size_t kBytes = 300 * 1024;
  constexpr int kBlocks = 10000;
  std::vector<unsigned char*> blocks(kBlocks);
  const double start = now_s();
  for (long i = 0; i < p.rounds; ++i) {
    for (int k = 0; k < kBlocks; ++k) {
      blocks[static_cast<std::size_t>(k)] = static_cast<unsigned char*>(std::malloc(kBytes));
      if (blocks[static_cast<std::size_t>(k)] == nullptr) fail("large-live: malloc failed");
      blocks[static_cast<std::size_t>(k)][0] = static_cast<unsigned char>(k);
    }
    for (int k = 0; k < kBlocks; ++k) {
      if (blocks[static_cast<std::size_t>(k)][0] != static_cast<unsigned char>(k))
        fail("large-live: block changed");
      std::free(blocks[static_cast<std::size_t>(k)]);
    }
  }
  result res;
  res.seconds = now_s() - start;
  res.unit = "blocks/s";
  res.throughput = static_cast<double>(p.rounds) * kBlocks / res.seconds;
  return res;
}

}  // namespace percpu::workload
