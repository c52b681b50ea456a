// percpu malloc's per-CPU caches (see cpu_cache.h), on the stack operations of percpu::buffer.
#include "percpu/malloc/cpu_cache.h"

#include <sys/mman.h>

#include <array>
#include <atomic>

#include <percpu/buffer.h>

namespace percpu::malloc_impl {
namespace {

constexpr index_mode kMode = index_mode::mm_cid;  // the runtime uses cpu_id where mm_cid is missing

// Word offset of each class's stack (count, then entries) inside an index's region.
constexpr std::array<std::size_t, kClassCount + 1> make_offsets() {
  std::array<std::size_t, kClassCount + 1> o{};
  for (std::size_t c = 1; c < kClassCount; ++c) o[c + 1] = o[c] + 1 + cache_capacity(c);
  return o;
}
constexpr auto kOffsets = make_offsets();
// An index's region, rounded up to whole cache lines.
constexpr std::size_t kRegionWords = (kOffsets[kClassCount] + 7) / 8 * 8;

std::atomic<std::intptr_t*> g_regions{nullptr};
std::atomic<int> g_indices{0};  // every initializing thread stores the same value

std::intptr_t* stack_of(int index, std::size_t cls) noexcept {
  return g_regions.load(std::memory_order_relaxed) +
         static_cast<std::size_t>(index) * kRegionWords + kOffsets[cls];
}

}  // namespace

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
                                         std::memory_order_acq_rel))
    munmap(m, bytes);  // another thread made them first
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

}  // namespace percpu::malloc_impl
