// percpu-malloc-workload: allocation workloads run by `percpu bench malloc` under LD_PRELOAD of
// each allocator. The program itself uses only the C and C++ libraries, so the allocator that
// serves it is whichever one is preloaded. Every object carries a tag at both ends that is
// checked before it is freed: an allocator that hands out overlapping objects fails the run.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace percpu::workload {

/// Parameters of every workload (each uses those it needs).
struct params {
  int threads = 400;       ///< service: threads; churn: threads created in all; larson, xmalloc:
                           ///< threads (xmalloc: producers, and as many consumers)
  int active = 0;          ///< service: requests served at once (0: online CPUs)
  int pairs = 0;           ///< producer/consumer pairs (0: online CPUs)
  long requests = 20000;   ///< service: requests in all
  long objects = 2000000;  ///< producer/consumer: objects per pair; xmalloc: per producer;
                           ///< larson: operations per thread and generation
  int think_us = 1000;     ///< service: a thread's idle time between its requests (µs)
  int batches = 200;       ///< latency: timed batches per size
  long rounds = 100;       ///< large-*: repetitions of the pattern; larson: generations
  long megabytes = 800;    ///< idle: MiB allocated and freed before the idle time
  long idle_ms = 3000;     ///< idle: milliseconds without allocator calls before the end RSS
  int seed = 1;
};

/// A workload's results, printed as one JSON object by main().
struct result {
  double seconds = 0;               ///< wall time of the measured part
  double throughput = 0;            ///< units per second
  std::string unit;                 ///< what throughput counts
  double p50_us = -1, p99_us = -1;  ///< latency percentiles of requests (service)
  std::vector<std::pair<std::size_t, std::pair<double, double>>> by_size;  ///< latency: ns p50, p99
};

/// The workloads (each file's header says what it does): run one with `p`, return its result.
/// Each exits the process with status 3 and a message when an object's tags changed.
result run_service(const params& p);
result run_producer_consumer(const params& p);
result run_latency(const params& p);
result run_churn(const params& p);
result run_large_churn(const params& p);
result run_large_realloc(const params& p);
result run_large_live(const params& p);
result run_larson(const params& p);
result run_xmalloc(const params& p);
result run_idle(const params& p);
result run_mix(const params& p);

// ---- helpers shared by the workloads ----

/// xorshift64*: a per-thread generator that never allocates.
struct rng {
  std::uint64_t s;
  explicit rng(std::uint64_t seed) : s(seed * 0x9E3779B97F4A7C15ull + 1) {}
  std::uint64_t next() {
    s ^= s >> 12;
    s ^= s << 25;
    s ^= s >> 27;
    return s * 0x2545F4914F6CDD1Dull;
  }
  /// Uniform in [lo, hi].
  std::size_t range(std::size_t lo, std::size_t hi) { return lo + next() % (hi - lo + 1); }
};

/// A request-mix object size: 60% 16-128 B, 30% 129-1024 B, 9% 1-8 KiB, 1% 8-64 KiB.
std::size_t mixed_size(rng& r);

/// The tag of object `p` held by `owner`: its address mixed with the owner (two live objects
/// that overlap overwrite each other's).
std::uint64_t tag_of(const void* p, std::uint64_t owner);
/// Writes the tags at both ends of `p`'s `size` (at least 16) bytes.
void write_tags(void* p, std::size_t size, std::uint64_t owner);
/// Checks the tags write_tags() wrote (exits with a message naming the corruption).
void check_tags(const void* p, std::size_t size, std::uint64_t owner);
/// Allocates `size` bytes (at least 16) and writes the tags; exits with a message on NULL.
void* tagged_alloc(std::size_t size, std::uint64_t owner);
/// Checks the tags `tagged_alloc` wrote (exits with a message naming the corruption), frees.
void tagged_free(void* p, std::size_t size, std::uint64_t owner);
/// Writes the whole object (up to 4 KiB, then one byte per page), as a service filling its
/// buffers would, keeping the tags.
void touch(void* p, std::size_t size);

/// Wall clock in seconds (CLOCK_MONOTONIC).
double now_s();
/// The p-th percentile (0-100) of `v` (sorted in place).
double percentile(std::vector<double>& v, double p);

}  // namespace percpu::workload
