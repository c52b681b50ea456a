// The limit of `percpu bench ops`: each primitive as the shortest rseq sequence that does it,
// written by hand for this benchmark. Read the index from the area, arm the section, compare the
// index, do the work, commit; no mode check, no bounds check, no retry bookkeeping.
// What percpu adds on top of this is what the suite's ratio shows. (x86-64 only; ABI: Linux
// include/uapi/linux/rseq.h.)
#include "bench/ops.h"

#include <percpu/percpu.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace percpu::cli {

#if defined(__x86_64__)
namespace {

std::intptr_t g_off;  // the area's offset from the thread pointer (glibc's or percpu's)

// Descriptor 3, section [1, 2), abort handler 4 (after the signature), which jumps to `abort`.
#define MIN_HEAD                              \
  ".pushsection __rseq_cs, \"aw\"\n\t"        \
  ".balign 32\n\t"                            \
  "3:\n\t"                                    \
  ".long 0, 0\n\t"                            \
  ".quad 1f, (2f - 1f), 4f\n\t"               \
  ".popsection\n\t"                           \
  "leaq 3b(%%rip), %%rax\n\t"                 \
  "movq %%rax, %%fs:8(%[off])\n\t"            \
  "1:\n\t"                                    \
  "cmpl %[index], %%fs:%c[field](%[off])\n\t" \
  "jnz 4f\n\t"
#define MIN_TAIL                            \
  "2:\n\t"                                  \
  ".pushsection __rseq_failure, \"ax\"\n\t" \
  ".byte 0x0f, 0xb9, 0x3d\n\t"              \
  ".long 0x53053053\n\t"                    \
  "4:\n\t"                                  \
  "jmp %l[abort]\n\t"                       \
  ".popsection\n\t"
#define MIN_OPERANDS [off] "r"(g_off), [index] "r"(index), [field] "i"(Field)

template <std::uint32_t Field>
int index_now() noexcept {
  return arch::load_area_i32<Field>(g_off);
}

// Each returns 0 (committed), 1 (compare failed) or -1 (aborted, or not on `index`).
template <std::uint32_t Field>
inline int min_add(std::intptr_t* v, std::intptr_t count, int index) noexcept {
  asm goto(MIN_HEAD "addq %[count], %[v]\n\t" MIN_TAIL
           :
           : MIN_OPERANDS, [v] "m"(*v), [count] "er"(count)
           : "rax", "memory", "cc"
           : abort);
  return 0;
abort:
  return -1;
}

template <std::uint32_t Field>
inline int min_compare_store(std::intptr_t* v, std::intptr_t expect, std::intptr_t newv,
                             int index) noexcept {
  asm goto(MIN_HEAD
           "cmpq %[v], %[expect]\n\t"
           "jnz %l[ne]\n\t"
           "movq %[newv], %[v]\n\t" MIN_TAIL
           :
           : MIN_OPERANDS, [v] "m"(*v), [expect] "r"(expect), [newv] "r"(newv)
           : "rax", "memory", "cc"
           : abort, ne);
  return 0;
abort:
  return -1;
ne:
  return 1;
}

template <std::uint32_t Field>
inline int min_pop(std::intptr_t* head, std::intptr_t* out, int index) noexcept {
  asm goto(MIN_HEAD
           "movq %[head], %%rbx\n\t"
           "testq %%rbx, %%rbx\n\t"
           "jz %l[ne]\n\t"
           "movq (%%rbx), %%rcx\n\t"
           "movq %%rcx, %[head]\n\t"
           "2:\n\t"
           "movq %%rbx, %[out]\n\t"
           ".pushsection __rseq_failure, \"ax\"\n\t"
           ".byte 0x0f, 0xb9, 0x3d\n\t"
           ".long 0x53053053\n\t"
           "4:\n\t"
           "jmp %l[abort]\n\t"
           ".popsection\n\t"
           :
           : MIN_OPERANDS, [head] "m"(*head), [out] "m"(*out)
           : "rax", "rbx", "rcx", "memory", "cc"
           : abort, ne);
  return 0;
abort:
  return -1;
ne:
  return 1;
}

template <std::uint32_t Field>
inline int min_compare_store_store(std::intptr_t* v, std::intptr_t expect, std::intptr_t* v2,
                                   std::intptr_t newv2, std::intptr_t newv, int index) noexcept {
  asm goto(MIN_HEAD
           "cmpq %[v], %[expect]\n\t"
           "jnz %l[ne]\n\t"
           "movq %[newv2], %[v2]\n\t"
           "movq %[newv], %[v]\n\t" MIN_TAIL
           :
           : MIN_OPERANDS, [v] "m"(*v), [expect] "r"(expect), [v2] "m"(*v2), [newv2] "r"(newv2),
             [newv] "r"(newv)
           : "rax", "memory", "cc"
           : abort, ne);
  return 0;
abort:
  return -1;
ne:
  return 1;
}

template <std::uint32_t Field>
inline int min_compare_compare_store(std::intptr_t* v, std::intptr_t expect, std::intptr_t* v2,
                                     std::intptr_t expect2, std::intptr_t newv,
                                     int index) noexcept {
  asm goto(MIN_HEAD
           "cmpq %[v], %[expect]\n\t"
           "jnz %l[ne]\n\t"
           "cmpq %[v2], %[expect2]\n\t"
           "jnz %l[ne]\n\t"
           "movq %[newv], %[v]\n\t" MIN_TAIL
           :
           : MIN_OPERANDS, [v] "m"(*v), [expect] "r"(expect), [v2] "m"(*v2), [expect2] "r"(expect2),
             [newv] "r"(newv)
           : "rax", "memory", "cc"
           : abort, ne);
  return 0;
abort:
  return -1;
ne:
  return 1;
}

// Copies `words` 8-byte words (records here are whole words).
template <std::uint32_t Field>
inline int min_compare_copy_store(std::intptr_t* v, std::intptr_t expect, void* dst,
                                  const void* src, std::size_t words, std::intptr_t newv,
                                  int index) noexcept {
  asm goto(MIN_HEAD
           "cmpq %[v], %[expect]\n\t"
           "jnz %l[ne]\n\t"
           "movq %[src], %%rsi\n\t"
           "movq %[dst], %%rdi\n\t"
           "movq %[words], %%rcx\n\t"
           "5:\n\t"
           "movq (%%rsi), %%rdx\n\t"
           "movq %%rdx, (%%rdi)\n\t"
           "addq $8, %%rsi\n\t"
           "addq $8, %%rdi\n\t"
           "decq %%rcx\n\t"
           "jnz 5b\n\t"
           "movq %[newv], %[v]\n\t" MIN_TAIL
           :
           : MIN_OPERANDS, [v] "m"(*v), [expect] "r"(expect), [dst] "r"(dst), [src] "r"(src),
             [words] "r"(words), [newv] "r"(newv)
           : "rax", "rcx", "rdx", "rsi", "rdi", "memory", "cc"
           : abort, ne);
  return 0;
abort:
  return -1;
ne:
  return 1;
}

op_memory* g_memory;
char* g_base;  // g_memory->base()

std::intptr_t* words(int index) {
  return op_memory::region_of(g_base, index);
}
void clear_regions() {
  g_memory->clear();
}
void refill_lists() {
  g_memory->refill_lists();
}

// The sequences read the area directly, so each thread must be registered before its first
// one: where percpu registers its own area (glibc's registration off), it does so on a thread's
// first getcpu-cache call. An unregistered area reads cpu_id -1 (an index outside the regions)
// and an mm_cid that is no thread's own, and the kernel would not abort a section armed there.
template <auto Op, op_shape S>
struct registered_loop {
  static std::uint64_t loop(int thread, const std::atomic<bool>& stop) {
    (void)current_cpu();
    if (arch::load_area_i32<abi::kOffCpuId>(g_off) < 0) {
      // Registration failed in this thread (and the process left rseq mode): stop rather than
      // run sections the kernel would not protect.
      std::fprintf(stderr,
                   "percpu bench ops: a thread's rseq area is not registered: the "
                   "hand-written sequences cannot run\n");
      std::exit(1);
    }
    return shaped_loop<Op, S>(thread, stop);
  }
};

[[gnu::noinline, gnu::aligned(64)]] int minimal_cpu() {
  return arch::load_area_i32<abi::kOffCpuId>(g_off);
}
[[gnu::noinline, gnu::aligned(64)]] int minimal_mm_cid() {
  return arch::load_area_i32<abi::kOffMmCid>(g_off);
}
template <std::uint32_t Field>
void read_index() {
  keep(arch::load_area_i32<Field>(g_off));
}

template <std::uint32_t F>
void add_one() {
  for (;;) {
    const int i = index_now<F>();
    if (min_add<F>(&words(i)[0], 1, i) == 0) return;
  }
}

template <std::uint32_t F>
void lock_unlock() {
  int i;
  for (;;) {
    i = index_now<F>();
    if (min_compare_store<F>(&words(i)[0], 0, 1, i) == 0) break;
  }
  __atomic_store_n(&words(i)[0], 0, __ATOMIC_RELEASE);
}

template <std::uint32_t F>
void pop_push() {
  std::intptr_t item = 0;
  for (;;) {
    const int i = index_now<F>();
    const int r = min_pop<F>(&words(i)[0], &item, i);
    if (r == 0) break;
    if (r == 1) return;  // empty: threads of this index hold every item
  }
  for (;;) {
    const int i = index_now<F>();
    std::intptr_t* head = &words(i)[0];
    const std::intptr_t h = __atomic_load_n(head, __ATOMIC_RELAXED);
    reinterpret_cast<op_list_item*>(item)->next = reinterpret_cast<op_list_item*>(h);
    if (min_compare_store<F>(head, h, item, i) == 0) return;
  }
}

template <std::uint32_t F>
void buffer_push_pop() {
  static int dummy;
  const auto value = reinterpret_cast<std::intptr_t>(&dummy);
  for (;;) {
    const int i = index_now<F>();
    std::intptr_t* r = words(i);
    const std::intptr_t n = __atomic_load_n(&r[0], __ATOMIC_RELAXED);
    if (n == kBufferCapacity) break;
    if (min_compare_store_store<F>(&r[0], n, &r[8 + n], value, n + 1, i) == 0) break;
  }
  for (;;) {
    const int i = index_now<F>();
    std::intptr_t* r = words(i);
    const std::intptr_t n = __atomic_load_n(&r[0], __ATOMIC_RELAXED);
    if (n == 0) return;
    const std::intptr_t v = __atomic_load_n(&r[8 + n - 1], __ATOMIC_RELAXED);
    if (min_compare_compare_store<F>(&r[0], n, &r[8 + n - 1], v, n - 1, i) == 0) return;
  }
}

template <std::uint32_t F, std::size_t Bytes>
void memcpy_push_pop() {
  constexpr std::size_t kWords = Bytes / 8;
  std::intptr_t record[kWords] = {1};
  std::intptr_t out[kWords];
  for (;;) {
    const int i = index_now<F>();
    std::intptr_t* r = words(i);
    const std::intptr_t n = __atomic_load_n(&r[0], __ATOMIC_RELAXED);
    if (n == kBufferCapacity) break;
    if (min_compare_copy_store<F>(&r[0], n, &r[8 + n * kWords], record, kWords, n + 1, i) == 0)
      break;
  }
  for (;;) {
    const int i = index_now<F>();
    std::intptr_t* r = words(i);
    const std::intptr_t n = __atomic_load_n(&r[0], __ATOMIC_RELAXED);
    if (n == 0) return;
    if (min_compare_copy_store<F>(&r[0], n, out, &r[8 + (n - 1) * kWords], kWords, n - 1, i) == 0)
      return;
  }
}

template <std::uint32_t F>
void add_mode_rows(std::vector<op_contender>& out, index_mode m) {
  const op_who w = op_who::minimal;
  const op_primitive read =
      F == abi::kOffCpuId ? op_primitive::current_cpu : op_primitive::current_mm_cid;
  constexpr auto call_read = F == abi::kOffCpuId ? minimal_cpu : minimal_mm_cid;
  out.push_back({read, m, w, registered_loop<call_read, op_shape::call>::loop, {}});
  out.push_back(
      {read, m, w, registered_loop<read_index<F>, op_shape::inlined>::loop, {}, op_shape::inlined});
  add_structure_rows<registered_loop, add_one<F>, lock_unlock<F>, pop_push<F>, buffer_push_pop<F>,
                     memcpy_push_pop<F, 16>, memcpy_push_pop<F, 64>>(out, m, w, clear_regions,
                                                                     refill_lists);
}

}  // namespace

std::vector<op_contender> minimal_contenders(int slots, std::string& why_not) {
  const registration_info reg = registration();
  if (reg.fallback || reg.rseq_offset == 0) {
    why_not = "no rseq area is registered: fallback mode";
    return {};
  }
  g_off = reg.rseq_offset;
  g_memory = new op_memory(slots);
  g_base = g_memory->base();
  std::vector<op_contender> out;
  add_mode_rows<abi::kOffCpuId>(out, index_mode::cpu_id);
  if (reg.fields.mm_cid) add_mode_rows<abi::kOffMmCid>(out, index_mode::mm_cid);
  return out;
}

#else

std::vector<op_contender> minimal_contenders(int, std::string& why_not) {
  why_not = "the hand-written sequences are written for x86-64 only";
  return {};
}

#endif

}  // namespace percpu::cli
