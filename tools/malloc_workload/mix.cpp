// Workload 11, a randomized mix of small and large blocks (the shape of glibc's and
// mimalloc-bench's random-size stress programs: a table of live blocks, each operation replacing
// one): `threads` threads each keep 1,000 live blocks and replace a random one `rounds` times.
// Sizes are log-uniform from 1 B to 2 MiB (every order of magnitude as likely, so most blocks are
// small and most bytes are in large ones); 10% of replacements realloc() the block to the new
// size instead, and 5% use posix_memalign() with an alignment of 16 B to 4 KiB. Each block is
// written as a program fills its buffers (workload.h's touch(): its first 4 KiB, then a byte a
// page), so an allocator that returns freed pages to the kernel and hands them out again pays a
// page fault for each. Tags at both ends are checked before each free.
#include <stdlib.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include "workload.h"

namespace percpu::workload {
namespace {

constexpr int kLive = 1000;

std::size_t log_uniform_size(rng& r) {
  // 2^(21 u) for u uniform in [0, 1): 1 B .. 2 MiB.
  const double u = static_cast<double>(r.next() >> 11) / 9007199254740992.0;
  const auto size = static_cast<std::size_t>(std::exp2(21.0 * u));
  return size < 16 ? 16 : size;  // room for the tags at both ends
}

void mix_thread(long rounds, std::uint64_t id) {
  rng r(id);
  struct block {
    void* p = nullptr;
    std::size_t size = 0;
  };
  std::vector<block> live(kLive);
  for (long i = 0; i < rounds; ++i) {
    block& b = live[r.next() % kLive];
    const std::size_t size = log_uniform_size(r);
    const std::uint64_t pick = r.next() % 100;
    if (b.p != nullptr && pick < 10) {
      // realloc keeps the contents: the head tag must arrive, then the block is tagged anew.
      check_tags(b.p, b.size, id);
      std::uint64_t head;
      std::memcpy(&head, b.p, 8);
      void* q = std::realloc(b.p, size);
      if (q == nullptr || std::memcmp(q, &head, 8) != 0) {
        std::fprintf(stderr, "percpu-malloc-workload: mix: realloc failed or lost the contents\n");
        std::_Exit(3);
      }
      b = {q, size};
      write_tags(q, size, id);
    } else {
      if (b.p != nullptr) tagged_free(b.p, b.size, id);
      if (pick < 15) {
        const std::size_t alignment = std::size_t{16} << (r.next() % 9);  // 16 B .. 4 KiB
        void* q = nullptr;
        const int rc = posix_memalign(&q, alignment, size);
        if (rc != 0 || reinterpret_cast<std::uintptr_t>(q) % alignment != 0) {
          // (Debian's mimalloc 2.0 returns misaligned pointers here, e.g. 0x...180 for an
          // alignment of 256 and 512 bytes, after about a million calls.)
          std::fprintf(stderr,
                       "percpu-malloc-workload: mix: posix_memalign(%zu, %zu) returned %d and %p, "
                       "not aligned\n",
                       alignment, size, rc, q);
          std::_Exit(3);
        }
        b = {q, size};
        write_tags(q, size, id);
      } else {
        b = {tagged_alloc(size, id), size};
      }
    }
    touch(b.p, b.size);
  }
  for (block& b : live)
    if (b.p != nullptr) tagged_free(b.p, b.size, id);
}

}  // namespace

result run_mix(const params& p) {
  const double start = now_s();
  std::vector<std::thread> threads;
  for (int t = 0; t < p.threads; ++t)
    threads.emplace_back(mix_thread, p.rounds, static_cast<std::uint64_t>(p.seed) * 131 + t);
  for (auto& t : threads) t.join();
  result res;
  res.seconds = now_s() - start;
  res.unit = "ops/s";
  res.throughput = static_cast<double>(p.threads) * static_cast<double>(p.rounds) / res.seconds;
  return res;
}

}  // namespace percpu::workload
