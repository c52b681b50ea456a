// percpu malloc's statistics (see stats.h).
#include "malloc/stats.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>

#include "cancel_disabled.h"
#include "malloc/central.h"
#include "malloc/cpu_cache.h"
#include "malloc/fork_fair_mutex.h"
#include "malloc/maintenance.h"

namespace percpu::malloc_impl {
namespace {

// Refills and flushes of threads outside the per-CPU caches (the rest are counted on the
// caches' indices: cache_note_miss, cache_note_flush).
std::atomic<std::size_t> g_refills[kClassCount];
std::atomic<std::size_t> g_flushes[kClassCount];
std::atomic<std::size_t> g_leaked_frees;
// One printer at a time (print_stats' storage is shared); held across fork() (allocator.cpp),
// which a thread printing in a loop must not keep out (fork_fair_mutex.h).
constinit fork_fair_mutex g_printing;

// Resident pages from /proc/self/statm (second field), read without stdio.
std::size_t rss_bytes() noexcept {
  const int fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  char text[128];
  const ssize_t n = read(fd, text, sizeof text - 1);
  close(fd);
  if (n <= 0) return 0;
  text[n] = '\0';
  char* end = nullptr;
  std::strtoull(text, &end, 10);  // size
  const unsigned long long pages = std::strtoull(end, nullptr, 10);
  return static_cast<std::size_t>(pages) * static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
}

// snprintf into a stack buffer, then write: no allocation for these formats.
template <class... Args>
void put(int fd, const char* format, Args... args) noexcept {
  char line[256];
  const int n = std::snprintf(line, sizeof line, format, args...);
  if (n > 0 && write(fd, line, static_cast<std::size_t>(n < 256 ? n : 255)) < 0) {
  }
}

}  // namespace

void count_refill_outside(std::size_t cls) noexcept {
  g_refills[cls].fetch_add(1, std::memory_order_relaxed);
}

void count_leaked_free() noexcept {
  g_leaked_frees.fetch_add(1, std::memory_order_relaxed);
}

void count_flush(std::size_t cls) noexcept {
  if (!cache_note_flush(cls)) g_flushes[cls].fetch_add(1, std::memory_order_relaxed);
}

void collect_stats(malloc_stats& out) noexcept {
  out.heap = page_heap().stats();
  out.rss_bytes = rss_bytes();
  for (std::size_t c = 1; c < kClassCount; ++c) {
    const central_stats cs = central_stats_of(c);
    class_stats& k = out.classes[c];
    k.size = kClasses[c].size;
    k.spans = cs.spans;
    k.free_in_spans = cs.free_in_spans;
    k.transfer_objects = cs.transfer_objects;
    k.cached_objects = cache_count(c);
    k.refills = cache_misses(c) + g_refills[c].load(std::memory_order_relaxed);
    k.flushes = cache_flushes(c) + g_flushes[c].load(std::memory_order_relaxed);
    k.capacity = 0;
    for (int i = 0; i < cache_indices(); ++i) k.capacity += cache_capacity_of(i, c);
  }
  out.cache_indices = static_cast<std::size_t>(cache_indices());
  out.cache_budget = cache_budget_bytes();
  out.cache_committed = 0;
  for (int i = 0; i < cache_indices(); ++i) out.cache_committed += cache_committed_bytes(i);
  const maintenance_stats m = maintenance_stats_now();
  out.drains = m.drains;
  out.trimmed = m.trimmed_objects;
  out.leaked_frees = g_leaked_frees.load(std::memory_order_relaxed);
}

void stats_lock_for_fork() noexcept {
  g_printing.lock_for_fork();
}

void stats_unlock_after_fork() noexcept {
  g_printing.unlock_after_fork();
}

void print_stats(int fd) noexcept {
  // Large: kept off the stack of whoever asks (at exit, maybe a small one); one printer at a time.
  static malloc_stats s;
  // write() and the read of /proc are cancellation points: not in this noexcept function.
  percpu::detail::cancel_disabled no_cancel;
  g_printing.lock();
  collect_stats(s);
  put(fd,
      "percpu malloc: rss %zu KiB; page heap: %zu KiB mapped, %zu KiB in spans, %zu KiB free, "
      "%zu KiB released, %zu KiB large, %zu KiB metadata; %zu KiB returned at frees past its "
      "bound since start\n",
      s.rss_bytes >> 10, s.heap.mapped >> 10, s.heap.in_use >> 10, s.heap.free >> 10,
      s.heap.released >> 10, s.heap.large >> 10, s.heap.metadata >> 10,
      s.heap.released_by_bound >> 10);
  put(fd, "small spans' regions: %zu KiB, huge page advice %s (%zu changes since start)\n",
      s.heap.small_arena >> 10, s.heap.huge_advice ? "on" : "off", s.heap.huge_advice_changes);
  put(fd,
      "per-CPU caches: %zu indices, budget %zu KiB each, %zu KiB committed; maintenance: %zu "
      "idle drains, %zu objects trimmed; %zu frees in signal handlers leaked\n",
      s.cache_indices, s.cache_budget >> 10, s.cache_committed >> 10, s.drains, s.trimmed,
      s.leaked_frees);
  put(fd, "%6s %6s %12s %12s %12s %10s %10s %10s\n", "size", "spans", "free/spans", "transfer",
      "cpu caches", "capacity", "refills", "flushes");
  for (std::size_t c = 1; c < kClassCount; ++c) {
    const class_stats& k = s.classes[c];
    if (k.spans == 0 && k.cached_objects == 0 && k.refills == 0) continue;
    put(fd, "%6zu %6zu %12zu %12zu %12zu %10zu %10zu %10zu\n", k.size, k.spans, k.free_in_spans,
        k.transfer_objects, k.cached_objects, k.capacity, k.refills, k.flushes);
  }
  g_printing.unlock();
}

}  // namespace percpu::malloc_impl
