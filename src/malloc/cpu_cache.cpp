// percpu malloc's per-CPU caches (see cpu_cache.h), on the stack operations of percpu::buffer.
#include "malloc/cpu_cache.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdlib>

#include <percpu/buffer.h>
#include <percpu/membarrier.h>
#include <percpu/remote.h>

#include "malloc/central.h"
#include "malloc/env_parse.h"

namespace percpu::malloc_impl {
namespace {

constexpr index_mode kMode = index_mode::mm_cid;  // the runtime uses cpu_id where mm_cid is missing

using cache_layout::g_regions;
using cache_layout::kOffsets;
using cache_layout::kRegionWords;

std::atomic<int> g_indices{0};  // every initializing thread stores the same value

std::size_t g_budget = kDefaultCacheBudget;  // set by the first cache_init()

// Entries trim_stack() moves per fence: its copy lives on the caller's stack (2 KiB).
constexpr std::size_t kTrimChunk = 256;

// PERCPU_MALLOC_CPU_CACHE_BYTES: decimal digits only, at most 2^40 (env::parse_cache_budget());
// anything else keeps the default and says so once on stderr (without allocating).
std::size_t budget_from_environment() noexcept {
  const char* b = getenv("PERCPU_MALLOC_CPU_CACHE_BYTES");
  if (b == nullptr) return kDefaultCacheBudget;
  std::size_t v = 0;
  if (env::parse_cache_budget(b, &v)) return v;
  static const char kWarning[] =
      "percpu malloc: PERCPU_MALLOC_CPU_CACHE_BYTES is not a byte count up to 2^40 (decimal "
      "digits only); using the default, 3 MiB\n";
  if (write(STDERR_FILENO, kWarning, sizeof kWarning - 1) < 0) {
  }
  return kDefaultCacheBudget;
}

std::intptr_t* header_of(int index) noexcept {
  return g_regions.load(std::memory_order_relaxed) + static_cast<std::size_t>(index) * kRegionWords;
}

std::intptr_t* stack_of(int index, std::size_t cls) noexcept {
  return header_of(index) + kOffsets[cls];
}

// The stacks of `cls` in every index's region, for the generic stack operations.
percpu::arch::slot_table stacks_of(std::size_t cls) noexcept {
  return {reinterpret_cast<std::uintptr_t>(stack_of(0, cls)), cache_layout::kRegionBytes};
}

std::intptr_t* cap_of(int index, std::size_t cls) noexcept {
  return header_of(index) + cache_layout::kCapWord + cls;
}

std::intptr_t* committed_of(int index) noexcept {
  return header_of(index) + cache_layout::kCommittedWord;
}

// The capacity to use for the generic operations on `index`: the current one, bounded by the
// stack's room.
std::size_t usable_capacity(int index, std::size_t cls) noexcept {
  const auto cap = static_cast<std::size_t>(__atomic_load_n(cap_of(index, cls), __ATOMIC_RELAXED));
  return cap < cache_max_capacity(cls) ? cap : cache_max_capacity(cls);
}

// Adds 1 to header word `word` of the calling thread's index in one rseq commit (percpu::add:
// a locked add costs 15 ns on some of our CPUs, and a counter shared by every CPU moves its line
// between them at each event); false, counting nothing, when the thread is outside the caches.
bool count_on_index(std::size_t word) noexcept {
  const int indices = g_indices.load(std::memory_order_relaxed);
  return percpu::retry<kMode>([&](int index) {
           if (index < 0 || index >= indices) return percpu::status::compare_failed;
           return percpu::add<kMode>(header_of(index) + word, 1, index);
         }) == percpu::status::committed;
}

// Lowers `cls`'s capacity on `index` from `cap` to `to`, returning the bytes to the budget;
// false when another thread changed it first.
bool lower_capacity(int index, std::size_t cls, std::intptr_t cap, std::intptr_t to) noexcept {
  if (!__atomic_compare_exchange_n(cap_of(index, cls), &cap, to, false, __ATOMIC_RELAXED,
                                   __ATOMIC_RELAXED))
    return false;
  __atomic_fetch_sub(committed_of(index),
                     (cap - to) * static_cast<std::intptr_t>(kClasses[cls].size), __ATOMIC_RELAXED);
  return true;
}

}  // namespace

std::atomic<std::intptr_t*> cache_layout::g_regions{nullptr};
std::intptr_t* cache_layout::g_fast_stacks[kClassCount] = {};
std::intptr_t cache_layout::g_area_offset = 0;
std::intptr_t cache_layout::g_index_offset = 0;

bool cache_init() noexcept {
  // During a switch to fallback mode every operation waits for the switch, and the switching
  // thread itself allocates: until it is done, the central lists serve.
  if (__atomic_load_n(&percpu::detail::g_hot.fallback, __ATOMIC_ACQUIRE) ==
      percpu::detail::kSwitching)
    return false;
  if (g_regions.load(std::memory_order_acquire) != nullptr) return true;
  // The runtime's initialization allocates: while it runs (maybe further up this stack), the
  // caches are not used, and the operations below would wait for it.
  if (!percpu::detail::try_initialize()) return false;
  const int indices = index_space<kMode>();
  g_budget = budget_from_environment();
  const std::size_t bytes =
      static_cast<std::size_t>(indices) * kRegionWords * sizeof(std::intptr_t);
  void* m = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (m == MAP_FAILED) return false;
  std::intptr_t* expected = nullptr;
  g_indices.store(indices, std::memory_order_relaxed);
  if (!g_regions.compare_exchange_strong(expected, static_cast<std::intptr_t*>(m),
                                         std::memory_order_acq_rel)) {
    munmap(m, bytes);  // another thread made them first
    return true;
  }
  // The fast paths need a registered area; in fallback mode from the start they stay off.
  const std::intptr_t off = percpu::detail::g_hot.rseq_offset;
  if (off != 0) {
    cache_layout::g_area_offset = off;
    cache_layout::g_index_offset = percpu::detail::g_hot.mm_cid_index_offset;
    for (std::size_t cls = 1; cls < kClassCount; ++cls)
      __atomic_store_n(&cache_layout::g_fast_stacks[cls],
                       static_cast<std::intptr_t*>(m) + kOffsets[cls], __ATOMIC_RELEASE);
  }
  return true;
}

void* cache_pop(std::size_t cls) noexcept {
  std::intptr_t v = 0;
  if (!percpu::detail::stack_pop<kMode>(stacks_of(cls), v)) return nullptr;
  return reinterpret_cast<void*>(v);
}

bool cache_push(std::size_t cls, void* p) noexcept {
  const std::size_t cap = usable_capacity(current_index<kMode>(), cls);
  return percpu::detail::stack_push<kMode>(stacks_of(cls), cap, reinterpret_cast<std::intptr_t>(p));
}

namespace {

// Grows `cls`'s capacity on `index` by one batch, up to cache_max_capacity(), when the index's
// budget allows. Returns true when it grew.
bool grow_capacity(int index, std::size_t cls) noexcept {
  std::intptr_t cap = __atomic_load_n(cap_of(index, cls), __ATOMIC_RELAXED);
  const auto max = static_cast<std::intptr_t>(cache_max_capacity(cls));
  if (cap >= max) return false;
  const std::intptr_t step = std::min<std::intptr_t>(kClasses[cls].batch, max - cap);
  const std::intptr_t bytes = step * static_cast<std::intptr_t>(kClasses[cls].size);
  std::intptr_t committed = __atomic_load_n(committed_of(index), __ATOMIC_RELAXED);
  do {
    if (static_cast<std::size_t>(committed + bytes) > g_budget) return false;
  } while (!__atomic_compare_exchange_n(committed_of(index), &committed, committed + bytes, true,
                                        __ATOMIC_RELAXED, __ATOMIC_RELAXED));
  if (!__atomic_compare_exchange_n(cap_of(index, cls), &cap, cap + step, false, __ATOMIC_RELAXED,
                                   __ATOMIC_RELAXED)) {
    __atomic_fetch_sub(committed_of(index), bytes, __ATOMIC_RELAXED);  // changed meanwhile
    return false;
  }
  return true;
}

// The calling thread's index, or -1 when it is outside the caches.
int cache_index_now() noexcept {
  const int index = current_index<kMode>();
  return index >= 0 && index < g_indices.load(std::memory_order_relaxed) ? index : -1;
}

}  // namespace

bool cache_note_miss(std::size_t cls, bool* counted) noexcept {
  const bool c = count_on_index(cache_layout::kMissWord + cls);
  if (counted != nullptr) *counted = c;
  if (!c) return false;
  const int index = cache_index_now();  // maybe another index by now: it grows there
  return index >= 0 && grow_capacity(index, cls);
}

bool cache_note_flush(std::size_t cls) noexcept {
  return count_on_index(cache_layout::kFlushWord + cls);
}

overflow_action cache_note_overflow(std::size_t cls) noexcept {
  const int index = cache_index_now();
  if (index < 0) return overflow_action::none;
  const std::intptr_t cap = __atomic_load_n(cap_of(index, cls), __ATOMIC_RELAXED);
  const auto batch = static_cast<std::intptr_t>(kClasses[cls].batch);
  // Below one batch (0 on an index that never allocated the class: a thread that only frees
  // what others allocate): one batch, so that frees flush a batch at a time.
  if (cap < batch) return grow_capacity(index, cls) ? overflow_action::grew : overflow_action::none;
  std::intptr_t* h = header_of(index);
  const std::intptr_t misses = __atomic_load_n(&h[cache_layout::kMissWord + cls], __ATOMIC_RELAXED);
  // A load and a store, not an exchange (a locked instruction): a thread that shares the index
  // and overflows at the same moment changes no more than which of the two grows the capacity.
  const std::intptr_t seen =
      __atomic_load_n(&h[cache_layout::kOverflowMissWord + cls], __ATOMIC_RELAXED);
  __atomic_store_n(&h[cache_layout::kOverflowMissWord + cls], misses, __ATOMIC_RELAXED);
  if (misses != seen)
    return grow_capacity(index, cls) ? overflow_action::grew : overflow_action::none;
  if (cap <= batch || !lower_capacity(index, cls, cap, cap - batch)) return overflow_action::none;
  return overflow_action::lowered;
}

std::size_t cache_capacity_of(int index, std::size_t cls) noexcept {
  if (index < 0 || index >= cache_indices() || cls == 0 || cls >= kClassCount) return 0;
  return static_cast<std::size_t>(__atomic_load_n(cap_of(index, cls), __ATOMIC_RELAXED));
}

std::size_t cache_committed_bytes(int index) noexcept {
  if (index < 0 || index >= cache_indices()) return 0;
  return static_cast<std::size_t>(__atomic_load_n(committed_of(index), __ATOMIC_RELAXED));
}

std::size_t cache_budget_bytes() noexcept {
  return g_budget;
}

std::size_t cache_pop_many(std::size_t cls, void** out, std::size_t n) noexcept {
  return percpu::detail::stack_pop_many<kMode>([&](int index) { return stack_of(index, cls); },
                                               reinterpret_cast<std::intptr_t*>(out), n);
}

std::size_t cache_push_many(std::size_t cls, void* const* in, std::size_t n) noexcept {
  return percpu::detail::stack_push_many<kMode>([&](int index) { return stack_of(index, cls); },
                                                cache_max_capacity(cls),
                                                reinterpret_cast<const std::intptr_t*>(in), n);
}

std::size_t cache_count(std::size_t cls) noexcept {
  if (g_regions.load(std::memory_order_acquire) == nullptr) return 0;
  std::size_t n = 0;
  const int indices = g_indices.load(std::memory_order_relaxed);
  for (int i = 0; i < indices; ++i)
    n += static_cast<std::size_t>(__atomic_load_n(stack_of(i, cls), __ATOMIC_RELAXED) &
                                  ~percpu::detail::kCountClosed);
  return n;
}

namespace {

// True when the page holding `p` is resident: a stack on a page never touched is empty, and
// reading it would populate the page (kernels without a shared zero page).
std::uintptr_t page_size() noexcept {
  static const auto size = static_cast<std::uintptr_t>(sysconf(_SC_PAGESIZE));
  return size;
}

bool resident(const void* p) noexcept {
  const std::uintptr_t page = page_size();
  unsigned char v = 1;
  const auto start = reinterpret_cast<std::uintptr_t>(p) / page * page;
  if (mincore(reinterpret_cast<void*>(start), 1, &v) != 0) return true;
  return (v & 1) != 0;
}

}  // namespace

int cache_indices() noexcept {
  return g_regions.load(std::memory_order_acquire) == nullptr
             ? 0
             : g_indices.load(std::memory_order_relaxed);
}

std::uint64_t cache_fingerprint(int index) noexcept {
  if (index < 0 || index >= cache_indices()) return 0;
  std::uint64_t f = 0;
  const std::intptr_t* last_page = nullptr;
  bool page_resident = false;
  for (std::size_t cls = 1; cls < kClassCount; ++cls) {
    std::intptr_t* w = stack_of(index, cls);
    const auto* page = reinterpret_cast<const std::intptr_t*>(reinterpret_cast<std::uintptr_t>(w) /
                                                              page_size() * page_size());
    if (page != last_page) {
      last_page = page;
      page_resident = resident(w);
    }
    if (!page_resident) continue;
    const auto n = static_cast<std::uint64_t>(__atomic_load_n(w, __ATOMIC_RELAXED));
    f = f * 0x100000001B3ull + n;  // FNV-style mix: any count change changes it
  }
  return f;
}

namespace {

// Moves the entries of `cls`'s stack on `index` above `keep` to the central lists, at most
// kTrimChunk a round: closes the count, fences the index, copies the top entries out, reopens
// with the lower count. Returns how many it moved; -1 when no fence is available or another
// remote operation is in progress before anything moved (a later round that cannot go on ends
// the trim with what it moved; the next pass retries).
std::ptrdiff_t trim_stack(int index, std::size_t cls, std::size_t keep) noexcept {
  // Without the membarrier RSEQ fence, fence_index() would move this thread over the CPUs
  // (a migration sweep): not something malloc may do to a caller's affinity.
  if (percpu::rseq_active() && !percpu::membarrier_rseq_available()) return -1;
  std::intptr_t* w = stack_of(index, cls);
  if (!resident(w)) return 0;  // never touched: empty
  const auto k = static_cast<std::intptr_t>(keep);
  const auto batch = static_cast<std::intptr_t>(kClasses[cls].batch);
  std::intptr_t moved = 0;
  for (;;) {
    if ((__atomic_load_n(w, __ATOMIC_ACQUIRE) & ~percpu::detail::kCountClosed) <= k) break;
    void* taken[kTrimChunk];
    std::intptr_t n = 0, now = 0;
    {
      // Never waits for another remote operation: this may run inside malloc called from one
      // (percpu::pool's drain allocates while it holds its section); the next pass retries.
      percpu::detail::remote_section remote(std::try_to_lock);
      if (!remote.owns() || percpu::detail::try_close_count<kMode>(w, index, n))
        return moved != 0 ? moved : -1;
      // Closed and fenced: no section on this index can commit until the count is stored.
      const std::intptr_t low = std::max(k, n - static_cast<std::intptr_t>(kTrimChunk));
      for (std::intptr_t j = low; j < n; ++j) taken[now++] = reinterpret_cast<void*>(w[1 + j]);
      __atomic_store_n(w, std::min(n, low), __ATOMIC_RELEASE);
    }
    // In whole batches where possible: they stop in the transfer cache.
    for (std::intptr_t j = 0; j < now; j += batch)
      central_insert(cls, taken + j, static_cast<std::size_t>(std::min(batch, now - j)));
    moved += now;
    if (now == 0) break;
  }
  return moved;
}

}  // namespace

std::size_t cache_drain(int index) noexcept {
  if (index < 0 || index >= cache_indices()) return 0;
  std::size_t moved = 0;
  for (std::size_t cls = 1; cls < kClassCount; ++cls) {
    const std::ptrdiff_t m = trim_stack(index, cls, 0);
    if (m < 0) return moved;  // no fence on this machine: the caches stay as they are
    moved += static_cast<std::size_t>(m);
    // An idle index gives its budget back; a thread that comes to run there starts over.
    const std::intptr_t cap = __atomic_load_n(cap_of(index, cls), __ATOMIC_RELAXED);
    if (cap != 0) lower_capacity(index, cls, cap, 0);
  }
  return moved;
}

std::size_t cache_shrink_unused(int index) noexcept {
  if (index < 0 || index >= cache_indices()) return 0;
  std::intptr_t* h = header_of(index);
  if (!resident(h)) return 0;
  std::size_t moved = 0;
  for (std::size_t cls = 1; cls < kClassCount; ++cls) {
    const std::intptr_t misses =
        __atomic_load_n(&h[cache_layout::kMissWord + cls], __ATOMIC_RELAXED);
    std::intptr_t& seen = h[cache_layout::kSeenMissWord + cls];  // the pass's own word
    const bool unused = misses == seen;
    seen = misses;
    const std::intptr_t cap = __atomic_load_n(cap_of(index, cls), __ATOMIC_RELAXED);
    if (!unused || cap == 0) continue;
    const std::intptr_t to = cap - std::min<std::intptr_t>(cap, kClasses[cls].batch);
    if (!lower_capacity(index, cls, cap, to)) continue;
    const std::ptrdiff_t m = trim_stack(index, cls, static_cast<std::size_t>(to));
    if (m < 0) break;
    moved += static_cast<std::size_t>(m);
  }
  return moved;
}

namespace {

// The sum of header word `word` over every index whose header page is resident.
std::size_t sum_over_indices(std::size_t word) noexcept {
  std::size_t n = 0;
  for (int i = 0; i < cache_indices(); ++i) {
    std::intptr_t* h = header_of(i);
    if (resident(h)) n += static_cast<std::size_t>(__atomic_load_n(h + word, __ATOMIC_RELAXED));
  }
  return n;
}

}  // namespace

std::size_t cache_misses(std::size_t cls) noexcept {
  return sum_over_indices(cache_layout::kMissWord + cls);
}

std::size_t cache_flushes(std::size_t cls) noexcept {
  return sum_over_indices(cache_layout::kFlushWord + cls);
}

}  // namespace percpu::malloc_impl
