// Helpers shared by the workloads: sizes, tagged objects, time, percentiles.
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "workload.h"

namespace percpu::workload {
namespace {

[[noreturn]] void die(const char* what, const void* p, std::size_t size) {
  std::fprintf(stderr, "percpu-malloc-workload: %s (object %p, %zu bytes)\n", what, p, size);
  std::_Exit(3);
}

}  // namespace

std::uint64_t tag_of(const void* p, std::uint64_t owner) {
  // The address as a number: given the pointer, GCC assumes the fresh (uninitialized) object
  // is read and warns (-Wmaybe-uninitialized) in debug builds.
  return reinterpret_cast<std::uintptr_t>(p) * 0x9E3779B97F4A7C15ull ^ owner;
}

std::size_t mixed_size(rng& r) {
  const std::uint64_t pick = r.next() % 100;
  if (pick < 60) return r.range(16, 128);
  if (pick < 90) return r.range(129, 1024);
  if (pick < 99) return r.range(1025, 8192);
  return r.range(8193, 65536);
}

void write_tags(void* p, std::size_t size, std::uint64_t owner) {
  const std::uint64_t t = tag_of(p, owner);
  std::memcpy(p, &t, 8);
  std::memcpy(static_cast<char*>(p) + size - 8, &t, 8);
}

void check_tags(const void* p, std::size_t size, std::uint64_t owner) {
  const std::uint64_t t = tag_of(p, owner);
  std::uint64_t head, tail;
  std::memcpy(&head, p, 8);
  std::memcpy(&tail, static_cast<const char*>(p) + size - 8, 8);
  if (head != t || tail != t) die("an object's tag changed: two live objects overlap", p, size);
}

void* tagged_alloc(std::size_t size, std::uint64_t owner) {
  void* p = std::malloc(size);
  if (p == nullptr) die("malloc returned NULL", nullptr, size);
  write_tags(p, size, owner);
  return p;
}

void tagged_free(void* p, std::size_t size, std::uint64_t owner) {
  check_tags(p, size, owner);
  std::free(p);
}

void touch(void* p, std::size_t size) {
  auto* c = static_cast<char*>(p);
  const std::size_t whole = std::min<std::size_t>(size, 4096);
  if (whole > 16) std::memset(c + 8, 0x5A, whole - 16);
  for (std::size_t off = 4096; off + 8 < size; off += 4096) c[off] = 1;
}

double now_s() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

double percentile(std::vector<double>& v, double p) {
  if (v.empty()) return -1;
  std::sort(v.begin(), v.end());
  const auto i = static_cast<std::size_t>(p / 100.0 * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

}  // namespace percpu::workload
