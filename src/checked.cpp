// The membership table of checked builds: an open-addressing hash set of item addresses in
// mmap-backed memory, so that it works inside signal handlers (no malloc, no mutex).
#include "percpu/checked.h"
#include "fork_order.h"
#include "percpu/internal/config.h"
#include "signals_blocked.h"

#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace percpu::detail {
namespace {

constexpr std::uintptr_t kEmpty = 0;
constexpr std::uintptr_t kErased = 1;  // tombstone: item addresses are never 1

struct table {
  std::uintptr_t* keys = nullptr;
  std::size_t capacity = 0;  // power of two
  std::size_t used = 0;      // live keys and tombstones
};

table g_table;
std::atomic<bool> g_locked{false};

class table_lock {
 public:
  table_lock() {
    while (g_locked.exchange(true, std::memory_order_acquire)) PERCPU_CPU_RELAX();
  }
  ~table_lock() { g_locked.store(false, std::memory_order_release); }

 private:
  signals_blocked no_signals_;  // first: blocked before the table is taken, until after it is freed
};

// fork(): the child must not inherit the table locked by a thread that does not exist there.
void lock_for_fork() {
  while (g_locked.exchange(true, std::memory_order_acquire)) PERCPU_CPU_RELAX();
}
void unlock_after_fork() {
  g_locked.store(false, std::memory_order_release);
}
__attribute__((constructor)) void register_fork_handlers() {
  set_fork_handlers(fork_stage::checked, lock_for_fork, unlock_after_fork, unlock_after_fork);
}

std::size_t hash(std::uintptr_t key) {
  key ^= key >> 33;
  key *= 0xff51afd7ed558ccdULL;
  key ^= key >> 33;
  return key;
}

// Index of `key`, or of the empty slot where it would go.
std::size_t find(const table& t, std::uintptr_t key) {
  std::size_t i = hash(key) & (t.capacity - 1);
  std::size_t first_tombstone = t.capacity;
  while (t.keys[i] != kEmpty && t.keys[i] != key) {
    if (t.keys[i] == kErased && first_tombstone == t.capacity) first_tombstone = i;
    i = (i + 1) & (t.capacity - 1);
  }
  if (t.keys[i] == kEmpty && first_tombstone != t.capacity) return first_tombstone;
  return i;
}

// Rehashes into a table sized for the live keys (tombstones are dropped, so push/pop cycles do
// not grow it).
bool grow() {
  std::size_t live = 0;
  for (std::size_t i = 0; i < g_table.capacity; ++i)
    live += g_table.keys[i] != kEmpty && g_table.keys[i] != kErased;
  std::size_t capacity = 4096;
  while (capacity < live * 4) capacity *= 2;
  void* p = mmap(nullptr, capacity * sizeof(std::uintptr_t), PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return false;
  table bigger{static_cast<std::uintptr_t*>(p), capacity, 0};
  for (std::size_t i = 0; i < g_table.capacity; ++i) {
    const std::uintptr_t key = g_table.keys[i];
    if (key == kEmpty || key == kErased) continue;
    bigger.keys[find(bigger, key)] = key;
    ++bigger.used;
  }
  if (g_table.keys) munmap(g_table.keys, g_table.capacity * sizeof(std::uintptr_t));
  g_table = bigger;
  return true;
}

}  // namespace

bool checked_insert(const void* item) noexcept {
  const auto key = reinterpret_cast<std::uintptr_t>(item);
  table_lock lock;
  if ((g_table.used + 1) * 2 > g_table.capacity && !grow())
    return true;  // out of memory for the check: store unchecked rather than refuse
  const std::size_t i = find(g_table, key);
  if (g_table.keys[i] == key) return false;
  if (g_table.keys[i] == kEmpty) ++g_table.used;
  g_table.keys[i] = key;
  return true;
}

bool checked_erase(const void* item) noexcept {
  const auto key = reinterpret_cast<std::uintptr_t>(item);
  table_lock lock;
  if (g_table.capacity == 0) return false;
  const std::size_t i = find(g_table, key);
  if (g_table.keys[i] != key) return false;
  g_table.keys[i] = kErased;
  return true;
}

}  // namespace percpu::detail
