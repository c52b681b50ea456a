// percpu malloc's per-CPU caches (see cpu_cache.h), on the stack operations of percpu::buffer.
#include "percpu/malloc/cpu_cache.h"

#include <sys/mman.h>
#include <unistd.h>

#include <array>
#include <atomic>

#include <percpu/buffer.h>
#include <percpu/remote.h>

#include "percpu/malloc/central.h"

namespace percpu::malloc_impl {
namespace {

constexpr index_mode kMode = index_mode::mm_cid;  // the runtime uses cpu_id where mm_cid is missing

using cache_layout::g_regions;
using cache_layout::kOffsets;
using cache_layout::kRegionWords;

std::atomic<int> g_indices{0};  // every initializing thread stores the same value

std::intptr_t* stack_of(int index, std::size_t cls) noexcept {
  return g_regions.load(std::memory_order_relaxed) +
         static_cast<std::size_t>(index) * kRegionWords + kOffsets[cls];
}

}  // namespace

std::atomic<std::intptr_t*> cache_layout::g_regions{nullptr};
std::atomic<std::intptr_t*> cache_layout::g_fast_regions{nullptr};
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
    cache_layout::g_index_offset =
        off + static_cast<std::intptr_t>(percpu::detail::g_hot.mm_cid_usable ? abi::kOffMmCid
                                                                             : abi::kOffCpuId);
    cache_layout::g_fast_regions.store(static_cast<std::intptr_t*>(m), std::memory_order_release);
  }
  return true;
}

void* cache_pop(std::size_t cls) noexcept {
  std::intptr_t v = 0;
  if (!percpu::detail::stack_pop<kMode>([&](int index) { return stack_of(index, cls); }, v))
    return nullptr;
  return reinterpret_cast<void*>(v);
}

bool cache_push(std::size_t cls, void* p) noexcept {
  return percpu::detail::stack_push<kMode>([&](int index) { return stack_of(index, cls); },
                                           cache_capacity(cls), reinterpret_cast<std::intptr_t>(p));
}

std::size_t cache_pop_many(std::size_t cls, void** out, std::size_t n) noexcept {
  return percpu::detail::stack_pop_many<kMode>([&](int index) { return stack_of(index, cls); },
                                               reinterpret_cast<std::intptr_t*>(out), n);
}

std::size_t cache_push_many(std::size_t cls, void* const* in, std::size_t n) noexcept {
  return percpu::detail::stack_push_many<kMode>([&](int index) { return stack_of(index, cls); },
                                                cache_capacity(cls),
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
bool resident(const void* p) noexcept {
  const long page = sysconf(_SC_PAGESIZE);
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
    static const auto page_size = static_cast<std::uintptr_t>(sysconf(_SC_PAGESIZE));
    const auto* page = reinterpret_cast<const std::intptr_t*>(reinterpret_cast<std::uintptr_t>(w) /
                                                              page_size * page_size);
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

std::size_t cache_drain(int index) noexcept {
  if (g_regions.load(std::memory_order_acquire) == nullptr || index < 0 ||
      index >= g_indices.load(std::memory_order_relaxed))
    return 0;
  std::size_t moved = 0;
  void* taken[2 * kMaxBatch];
  for (std::size_t cls = 1; cls < kClassCount; ++cls) {
    std::intptr_t* w = stack_of(index, cls);
    if (!resident(w) || (__atomic_load_n(w, __ATOMIC_ACQUIRE) & ~percpu::detail::kCountClosed) == 0)
      continue;
    std::intptr_t n = 0;
    try {
      percpu::detail::remote_section remote;
      n = percpu::detail::close_count<kMode>(w, index);
      // Closed and fenced: no section on this index can commit until the count is stored.
      for (std::intptr_t k = 0; k < n; ++k) taken[k] = reinterpret_cast<void*>(w[1 + k]);
      __atomic_store_n(w, 0, __ATOMIC_RELEASE);
    } catch (...) {
      return moved;  // no fence on this machine: the caches stay as they are
    }
    // In whole batches where possible: they stop in the transfer cache.
    const auto batch = static_cast<std::intptr_t>(kClasses[cls].batch);
    for (std::intptr_t k = 0; k < n; k += batch)
      central_insert(cls, taken + k, static_cast<std::size_t>(std::min(batch, n - k)));
    moved += static_cast<std::size_t>(n);
  }
  return moved;
}

}  // namespace percpu::malloc_impl
