// Large allocations as everyday programs make them, for the preload tests
// (malloc_large_test.cpp runs each case with glibc's malloc and with percpu malloc preloaded).
// Linked with nothing of percpu. Each case prints one line of results on standard output.
//
//   churn N          malloc 1 MiB, write it, free it, N times: "faults_per_iteration F"
//   realloc MIB      grow one block by 4 KiB steps to MIB MiB, checking its contents:
//                    "moves M ok" (M: how often the block moved)
//   live N BYTES     N blocks of BYTES held at once, not touched: "live K" (K obtained)
//   huge             malloc and calloc of 64 GiB, 1 TiB and 16 TiB: "malloc 64G NULL ENOMEM ..."
//   rlimit KIB       under RLIMIT_AS = KIB KiB: allocate 700 MB of 200-byte objects, free them,
//                    then 200 blocks of 1 MiB: "after_free K" (K of 200 obtained)
#include <sys/resource.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

long minor_faults() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}

int churn(long n) {
  constexpr std::size_t kSize = std::size_t{1} << 20;
  void* warm = std::malloc(kSize);  // the first one may fault everywhere
  std::memset(warm, 1, kSize);
  asm volatile("" : : "r"(warm) : "memory");
  std::free(warm);
  const long before = minor_faults();
  for (long i = 0; i < n; ++i) {
    auto* p = static_cast<unsigned char*>(std::malloc(kSize));
    if (p == nullptr) return 1;
    std::memset(p, static_cast<int>(i), kSize);
    asm volatile("" : : "r"(p) : "memory");  // the block is used: no eliding malloc+free
    std::free(p);
  }
  std::printf("faults_per_iteration %.2f\n", double(minor_faults() - before) / double(n));
  return 0;
}

int realloc_growth(std::size_t mib) {
  constexpr std::size_t kStep = 4096;
  unsigned char* p = nullptr;
  std::size_t size = 0;
  long moves = 0;
  while (size < (mib << 20)) {
    const std::size_t next = size + kStep;
    auto* q = static_cast<unsigned char*>(std::realloc(p, next));
    if (q == nullptr) return 1;
    if (q != p && p != nullptr) ++moves;
    // Every step's bytes carry their step number; check the previous step's survived.
    if (size >= kStep && q[size - kStep] != static_cast<unsigned char>((size / kStep) - 1)) {
      std::printf("moves %ld corrupt at %zu\n", moves, size);
      return 1;
    }
    std::memset(q + size, static_cast<int>(size / kStep), kStep);
    p = q;
    size = next;
  }
  for (std::size_t off = 0; off < size; off += kStep)
    if (p[off] != static_cast<unsigned char>(off / kStep)) {
      std::printf("moves %ld corrupt at %zu\n", moves, off);
      return 1;
    }
  std::free(p);
  std::printf("moves %ld ok\n", moves);
  return 0;
}

int live(long n, std::size_t bytes) {
  std::vector<void*> blocks;
  blocks.reserve(static_cast<std::size_t>(n));
  for (long i = 0; i < n; ++i) {
    void* p = std::malloc(bytes);
    if (p == nullptr) break;
    blocks.push_back(p);
  }
  std::printf("live %zu\n", blocks.size());
  for (void* p : blocks) std::free(p);
  return 0;
}

int huge() {
  const struct {
    const char* name;
    std::size_t bytes;
  } sizes[] = {
      {"64G", std::size_t{64} << 30}, {"1T", std::size_t{1} << 40}, {"16T", std::size_t{16} << 40}};
  std::string line;
  for (const auto& s : sizes) {
    for (int zeroed = 0; zeroed < 2; ++zeroed) {
      errno = 0;
      void* p = zeroed ? std::calloc(1, s.bytes) : std::malloc(s.bytes);
      line += std::string(zeroed ? "calloc " : "malloc ") + s.name +
              (p == nullptr ? (errno == ENOMEM ? " NULL ENOMEM " : " NULL other ") : " granted ");
      std::free(p);
    }
  }
  std::printf("%s\n", line.c_str());
  return 0;
}

int under_address_limit(long kib) {
  const struct rlimit limit { static_cast<rlim_t>(kib) * 1024, static_cast<rlim_t>(kib) * 1024 };
  if (setrlimit(RLIMIT_AS, &limit) != 0) return 2;
  constexpr std::size_t kSmall = 200;
  const std::size_t count = std::size_t{700} * 1000 * 1000 / kSmall;
  std::vector<void*> small;
  small.reserve(count);
  for (std::size_t i = 0; i < count; ++i) {
    void* p = std::malloc(kSmall);
    if (p == nullptr) break;
    std::memset(p, 1, kSmall);
    small.push_back(p);
  }
  for (void* p : small) std::free(p);
  std::vector<void*>().swap(small);
  int got = 0;
  std::vector<void*> big;
  for (int i = 0; i < 200; ++i) {
    void* p = std::malloc(std::size_t{1} << 20);
    if (p == nullptr) continue;
    std::memset(p, 1, std::size_t{1} << 20);
    big.push_back(p);
    ++got;
  }
  std::printf("after_free %d\n", got);
  for (void* p : big) std::free(p);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string what = argc > 1 ? argv[1] : "";
  if (what == "churn" && argc == 3) return churn(std::atol(argv[2]));
  if (what == "realloc" && argc == 3) return realloc_growth(std::strtoull(argv[2], nullptr, 10));
  if (what == "live" && argc == 4)
    return live(std::atol(argv[2]), std::strtoull(argv[3], nullptr, 10));
  if (what == "huge" && argc == 2) return huge();
  if (what == "rlimit" && argc == 3) return under_address_limit(std::atol(argv[2]));
  std::fprintf(stderr, "usage: %s churn N | realloc MIB | live N BYTES | huge | rlimit KIB\n",
               argv[0]);
  return 2;
}
