// percpu malloc's periodic upkeep (see maintenance.h).
#include "malloc/maintenance.h"

#include <pthread.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>

#include "cancel_disabled.h"
#include "malloc/central.h"
#include "malloc/cpu_cache.h"
#include "malloc/env_parse.h"
#include "malloc/page_heap.h"

namespace percpu::malloc_impl {
namespace {

std::atomic<std::int64_t> g_next_pass{0};
pthread_mutex_t g_pass_lock = PTHREAD_MUTEX_INITIALIZER;

// Guarded by g_pass_lock: each index's fingerprint at the previous pass (0: never seen).
constexpr int kMaxTrackedIndices = 4096;
std::uint64_t g_fingerprint[kMaxTrackedIndices];
maintenance_stats g_stats;

std::int64_t now_ns() noexcept {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

// Returns whether the pass moved or returned anything (the background thread waits for that).
bool pass_locked() noexcept {
  const maintenance_stats before = g_stats;
  ++g_stats.passes;
  const int indices = cache_indices();
  for (int i = 0; i < indices && i < kMaxTrackedIndices; ++i) {
    const std::uint64_t f = cache_fingerprint(i);
    // Unchanged and holding objects: nobody ran on this index since the last pass.
    if (f != 0 && f == g_fingerprint[i]) {
      const std::size_t moved = cache_drain(i);
      if (moved != 0) {
        ++g_stats.drains;
        g_stats.drained_objects += moved;
      }
      g_fingerprint[i] = cache_fingerprint(i);
    } else {
      // In use: classes without a miss since the last pass give a batch of capacity back.
      g_stats.trimmed_objects += cache_shrink_unused(i);
      g_fingerprint[i] = cache_fingerprint(i);
    }
  }
  // Transfer caches decay by half a pass: a busy class refills them from its flushes.
  for (std::size_t cls = 1; cls < kClassCount; ++cls)
    g_stats.transfer_objects_released += central_release_transfer(cls);
  // Decay: free spans not reused for kDecayNs go back to the kernel (the page heap keeps the
  // rest within its bound at every free).
  g_stats.released_bytes += page_heap().release_older_than(now_ns() - kDecayNs);
  return g_stats.drained_objects != before.drained_objects ||
         g_stats.trimmed_objects != before.trimmed_objects ||
         g_stats.transfer_objects_released != before.transfer_objects_released ||
         g_stats.released_bytes != before.released_bytes;
}

// The optional background thread (PERCPU_MALLOC_BACKGROUND=1): a pass every interval, so that
// a process that has stopped allocating returns its memory too. Started by the first pass that
// had work, not before: a thread makes the process multi-threaded, which unshare(CLONE_NEWUSER)
// and some sandboxes refuse.
std::atomic<bool> g_background_started{false};

void* background_main(void*) {
  for (;;) {
    timespec ts{0, kMaintenanceInterval};
    nanosleep(&ts, nullptr);
    maybe_maintain();
  }
  return nullptr;
}

bool background_wanted() noexcept {
  static const bool wanted = env::background_enabled(getenv("PERCPU_MALLOC_BACKGROUND"));
  return wanted;
}

void start_background() noexcept {
  bool expected = false;
  if (!background_wanted() ||
      !g_background_started.compare_exchange_strong(expected, true, std::memory_order_acq_rel))
    return;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_t t;
  if (pthread_create(&t, &attr, background_main, nullptr) == 0) {
    pthread_setname_np(t, "percpu-malloc");
  } else {
    g_background_started.store(false, std::memory_order_release);  // a later pass tries again
  }
  pthread_attr_destroy(&attr);
}

}  // namespace

void maybe_maintain() noexcept {
  const std::int64_t now = now_ns();
  std::int64_t next = g_next_pass.load(std::memory_order_relaxed);
  if (now < next) return;
  if (!g_next_pass.compare_exchange_strong(next, now + kMaintenanceInterval,
                                           std::memory_order_relaxed))
    return;                                   // another thread claimed this pass
  percpu::detail::cancel_disabled no_cancel;  // a pass drains caches: closes their slots
  if (pthread_mutex_trylock(&g_pass_lock) != 0) return;
  const bool worked = pass_locked();
  pthread_mutex_unlock(&g_pass_lock);
  // Only once a pass had work (memory to move or return): a program that never holds any, or
  // that calls unshare(CLONE_NEWUSER) early, stays single-threaded. Outside the lock: creating
  // a thread allocates.
  if (worked) start_background();
}

void maintenance_lock_for_fork() noexcept {
  pthread_mutex_lock(&g_pass_lock);
}

void maintenance_unlock_after_fork() noexcept {
  pthread_mutex_unlock(&g_pass_lock);
}

void maintenance_unlock_in_child() noexcept {
  g_background_started.store(false, std::memory_order_relaxed);  // the child has no such thread
  pthread_mutex_unlock(&g_pass_lock);
}

void maintain() noexcept {
  percpu::detail::cancel_disabled no_cancel;  // a pass drains caches: closes their slots
  pthread_mutex_lock(&g_pass_lock);
  pass_locked();
  pthread_mutex_unlock(&g_pass_lock);
}

maintenance_stats maintenance_stats_now() noexcept {
  pthread_mutex_lock(&g_pass_lock);
  const maintenance_stats s = g_stats;
  pthread_mutex_unlock(&g_pass_lock);
  return s;
}

}  // namespace percpu::malloc_impl
