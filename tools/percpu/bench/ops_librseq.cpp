// librseq's side of `percpu bench ops`: each primitive written the way librseq's own tests and
// benchmarks write it (tests/param_test.c: rseq_cpu_start() or rseq_current_mm_cid() for the
// index, then one rseq_load_* operation, retried until it commits), and its mempool for the
// per-CPU objects. Built only when CMake found librseq (pkg-config `librseq`).
#include "bench/ops.h"

#include <percpu/percpu.h>

#if defined(PERCPU_HAVE_LIBRSEQ)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wvolatile"  // librseq's C macros assign through volatile
#include <rseq/mempool.h>
#include <rseq/rseq.h>
#pragma GCC diagnostic pop

#include <cstddef>
#include <vector>

namespace percpu::cli {
namespace {

op_memory* g_memory;
char* g_base;  // g_memory->base(): regions a power of two apart, as rseq_percpu_ptr() steps
rseq_mempool* g_mempool;

std::intptr_t* words(int index) {
  return op_memory::region_of(g_base, index);
}
void clear_regions() {
  g_memory->clear();
}
void refill_lists() {
  g_memory->refill_lists();
}

// The index as librseq's tests take it: cpu_id_start (never negative, no check) or mm_cid.
template <rseq_percpu_mode P>
int index_now() {
  return P == RSEQ_PERCPU_CPU_ID ? static_cast<int>(rseq_cpu_start())
                                 : static_cast<int>(rseq_current_mm_cid());
}

[[gnu::noinline, gnu::aligned(64)]] int librseq_cpu() {
  return static_cast<int>(rseq_current_cpu());
}
[[gnu::noinline, gnu::aligned(64)]] int librseq_mm_cid() {
  return static_cast<int>(rseq_current_mm_cid());
}
// Inlined, the raw reads: rseq_current_cpu_raw() (no check of the sign; the checked
// rseq_current_cpu() is the call shape's) and rseq_current_mm_cid().
void read_cpu() {
  keep(rseq_current_cpu_raw());
}
void read_mm_cid() {
  keep(rseq_current_mm_cid());
}

template <rseq_percpu_mode P>
void add_one() {
  for (;;) {
    const int i = index_now<P>();
    if (rseq_load_add_store__ptr(RSEQ_MO_RELAXED, P, &words(i)[0], 1, i) == 0) return;
  }
}

template <rseq_percpu_mode P>
void lock_unlock() {
  int i;
  for (;;) {
    i = index_now<P>();
    if (rseq_load_cbne_store__ptr(RSEQ_MO_RELAXED, P, &words(i)[0], 0, 1, i) == 0) break;
  }
  rseq_smp_store_release(&words(i)[0], 0);
}

template <rseq_percpu_mode P>
void pop_push() {
  std::intptr_t item = 0;
  for (;;) {
    const int i = index_now<P>();
    const int r = rseq_load_cbeq_store_add_load_store__ptr(RSEQ_MO_RELAXED, P, &words(i)[0], 0,
                                                           offsetof(op_list_item, next), &item, i);
    if (r == 0) break;
    if (r > 0) return;  // empty
  }
  for (;;) {
    const int i = index_now<P>();
    std::intptr_t* head = &words(i)[0];
    const std::intptr_t h = RSEQ_READ_ONCE(*head);
    reinterpret_cast<op_list_item*>(item)->next = reinterpret_cast<op_list_item*>(h);
    if (rseq_load_cbne_store__ptr(RSEQ_MO_RELAXED, P, head, h, item, i) == 0) return;
  }
}

template <rseq_percpu_mode P>
void buffer_push_pop() {
  static int dummy;
  const auto value = reinterpret_cast<std::intptr_t>(&dummy);
  for (;;) {
    const int i = index_now<P>();
    std::intptr_t* r = words(i);
    const std::intptr_t n = RSEQ_READ_ONCE(r[0]);
    if (n == kBufferCapacity) break;
    if (rseq_load_cbne_store_store__ptr(RSEQ_MO_RELEASE, P, &r[0], n, &r[8 + n], value, n + 1, i) ==
        0)
      break;
  }
  for (;;) {
    const int i = index_now<P>();
    std::intptr_t* r = words(i);
    const std::intptr_t n = RSEQ_READ_ONCE(r[0]);
    if (n == 0) return;
    const std::intptr_t v = RSEQ_READ_ONCE(r[8 + n - 1]);
    if (rseq_load_cbne_load_cbne_store__ptr(RSEQ_MO_RELAXED, P, &r[0], n, &r[8 + n - 1], v, n - 1,
                                            i) == 0)
      return;
  }
}

template <rseq_percpu_mode P, std::size_t Bytes>
void memcpy_push_pop() {
  constexpr std::size_t kWords = Bytes / 8;
  std::intptr_t record[kWords] = {1};
  std::intptr_t out[kWords];
  for (;;) {
    const int i = index_now<P>();
    std::intptr_t* r = words(i);
    const std::intptr_t n = RSEQ_READ_ONCE(r[0]);
    if (n == kBufferCapacity) break;
    if (rseq_load_cbne_memcpy_store__ptr(RSEQ_MO_RELEASE, P, &r[0], n, &r[8 + n * kWords], record,
                                         Bytes, n + 1, i) == 0)
      break;
  }
  for (;;) {
    const int i = index_now<P>();
    std::intptr_t* r = words(i);
    const std::intptr_t n = RSEQ_READ_ONCE(r[0]);
    if (n == 0) return;
    if (rseq_load_cbne_memcpy_store__ptr(RSEQ_MO_RELAXED, P, &r[0], n, out,
                                         &r[8 + (n - 1) * kWords], Bytes, n - 1, i) == 0)
      return;
  }
}

void mempool_alloc_free() {
  void __rseq_percpu* p = rseq_mempool_percpu_zmalloc(g_mempool);
  rseq_mempool_percpu_free(p);
}

// librseq must know each thread before its first operation: with glibc's area this only
// checks that glibc registered it.
template <auto Op, op_shape S>
struct registered_loop {
  static std::uint64_t loop(int thread, const std::atomic<bool>& stop) {
    rseq_register_current_thread();
    return shaped_loop<Op, S>(thread, stop);
  }
};

template <rseq_percpu_mode P>
void add_mode_rows(std::vector<op_contender>& out, index_mode m) {
  const op_who w = op_who::librseq;
  const op_primitive read =
      P == RSEQ_PERCPU_CPU_ID ? op_primitive::current_cpu : op_primitive::current_mm_cid;
  constexpr auto call_read = P == RSEQ_PERCPU_CPU_ID ? librseq_cpu : librseq_mm_cid;
  constexpr auto inline_read = P == RSEQ_PERCPU_CPU_ID ? read_cpu : read_mm_cid;
  out.push_back({read, m, w, registered_loop<call_read, op_shape::call>::loop, {}});
  out.push_back(
      {read, m, w, registered_loop<inline_read, op_shape::inlined>::loop, {}, op_shape::inlined});
  add_structure_rows<registered_loop, add_one<P>, lock_unlock<P>, pop_push<P>, buffer_push_pop<P>,
                     memcpy_push_pop<P, 16>, memcpy_push_pop<P, 64>>(out, m, w, clear_regions,
                                                                     refill_lists);
  // The mempool has no per-CPU caches: the same pool serves both modes' rows.
  if (g_mempool != nullptr)
    add_shapes<mempool_alloc_free, registered_loop>(out, op_primitive::pool_alloc_free, m, w);
}

}  // namespace

std::vector<op_contender> librseq_contenders(int slots, std::string& why_not) {
  const registration_info reg = registration();
  if (reg.owner != area_owner::glibc) {
    // Only one area can be registered per thread: librseq and percpu would each want their own.
    why_not = reg.owner == area_owner::percpu
                  ? "not comparable here: glibc's registration is off, so percpu registered its "
                    "own area, and librseq would need its own too (one area per thread)"
                  : "no rseq area is registered: fallback mode";
    return {};
  }
  if (rseq_register_current_thread() != 0) {
    why_not = "librseq could not use glibc's rseq area";
    return {};
  }
  g_memory = new op_memory(slots);
  g_base = g_memory->base();
  rseq_mempool_attr* attr = rseq_mempool_attr_create();
  rseq_mempool_attr_set_percpu(attr, RSEQ_MEMPOOL_STRIDE, slots);
  g_mempool = rseq_mempool_create("percpu bench ops", sizeof(std::intptr_t), attr);
  rseq_mempool_attr_destroy(attr);

  std::vector<op_contender> out;
  add_mode_rows<RSEQ_PERCPU_CPU_ID>(out, index_mode::cpu_id);
  if (rseq_mm_cid_available()) add_mode_rows<RSEQ_PERCPU_MM_CID>(out, index_mode::mm_cid);
  return out;
}

std::optional<double> librseq_pool_bytes_per_object(int slots) {
  rseq_mempool_attr* attr = rseq_mempool_attr_create();
  rseq_mempool_attr_set_percpu(attr, RSEQ_MEMPOOL_STRIDE, slots);
  rseq_mempool* pool = rseq_mempool_create("percpu bench ops memory", sizeof(std::intptr_t), attr);
  rseq_mempool_attr_destroy(attr);
  if (pool == nullptr) return std::nullopt;
  std::vector<std::intptr_t __rseq_percpu*> objects(kMemoryObjects);
  const std::size_t before = resident_bytes_now();
  for (int k = 0; k < kMemoryObjects; ++k) {
    objects[static_cast<std::size_t>(k)] =
        static_cast<std::intptr_t __rseq_percpu*>(rseq_mempool_percpu_zmalloc(pool));
    for (int cpu = 0; cpu < slots; ++cpu)
      *rseq_percpu_ptr(objects[static_cast<std::size_t>(k)], cpu) = k;
  }
  const std::size_t after = resident_bytes_now();
  for (auto* p : objects) rseq_mempool_percpu_free(p);
  rseq_mempool_destroy(pool);
  if (before == 0 || after < before) return std::nullopt;
  return static_cast<double>(after - before) / kMemoryObjects;
}

}  // namespace percpu::cli

#else

namespace percpu::cli {

std::vector<op_contender> librseq_contenders(int, std::string& why_not) {
  why_not =
      "librseq not found when percpu was built (pkg-config librseq; docs/benchmarks.md says how to "
      "build it from its source)";
  return {};
}

std::optional<double> librseq_pool_bytes_per_object(int) {
  return std::nullopt;
}

}  // namespace percpu::cli

#endif
