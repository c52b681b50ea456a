// The getcpu cache: the CPU, NUMA node and concurrency id of the calling thread, read from the
// rseq area the kernel keeps up to date (one %fs-relative load on the fast path).
//
// The values describe where the thread was at the moment of the load; the thread may migrate
// right after. Use them as hints, or inside a per-CPU operation (percpu/ops.h), which checks
// the index again inside its critical section.
#pragma once

#define PERCPU_PUBLIC_HEADER 1  // lets it include percpu/internal/

#include "percpu/internal/config.h"  // first: the C++20 check

#include <cstdint>

#include "percpu/internal/arch.h"
#include "percpu/runtime.h"

namespace percpu {

/// How per-CPU data is indexed.
enum class index_mode {
  /// By the CPU the thread runs on: indices in [0, possible CPUs), see machine_topology().
  cpu_id,
  /// By the kernel's per-process concurrency id: indices in [0, possible CPUs) but kept close to
  /// 0 (at most min(threads, allowed CPUs) distinct values), so memory follows the threads that
  /// run. Served by cpu_id on kernels before 6.3, which lack mm_cid.
  mm_cid,
};

/// Name of an index mode: "cpu_id" or "mm_cid".
constexpr const char* to_string(index_mode m) noexcept {
  return m == index_mode::cpu_id ? "cpu_id" : "mm_cid";
}

namespace detail {
/// True when `id` read from the area lies in [0, bound): one unsigned compare, which also
/// rejects the negative cpu_id of an unregistered area.
PERCPU_ALWAYS_INLINE bool in_bound(std::int32_t id, std::uint32_t bound) noexcept {
  return static_cast<std::uint32_t>(id) < bound;
}

/// The fast path of current_cpu(), without its slow path: sets `cpu` and returns true when the
/// area holds a cpu_id inside the index space; false otherwise (not initialized, thread not
/// registered, fallback mode from the start, an id beyond the index space).
///
/// One word gives the area's offset and the index space's bound (g_hot.cpu_word), loaded and
/// split so the compiler may hoist both out of the caller's loop (load_getcpu_word()): inlined
/// in a loop, the fast path is the load of cpu_id and one compare. Before initialization the word
/// is 0: the load reads the thread's control block (always mapped; the value is discarded against a
/// bound of 0). In fallback mode from the start the offset is percpu's own area, never
/// registered: cpu_id -1.
PERCPU_ALWAYS_INLINE bool try_current_cpu(int& cpu) noexcept {
  const getcpu_parts w = load_getcpu_word<&hot_state::cpu_word>();
  cpu = arch::load_area_i32<abi::kOffCpuId>(w.offset);
  return in_bound(cpu, w.bound);
}

/// The fast path of current_mm_cid(), likewise: reads the field of g_hot.mm_cid_word (mm_cid,
/// or cpu_id where the kernel lacks mm_cid). The bound is taken as 0 where the area may not
/// serve mm_cid mode (if_area_registered(): glibc's area of a thread glibc did not
/// register holds mm_cid 0, a valid-looking id); inlined in a loop, that check is hoisted with
/// the word, and the fast path is again one load and one compare.
PERCPU_ALWAYS_INLINE bool try_current_mm_cid(int& cid) noexcept {
  const getcpu_parts w = load_getcpu_word<&hot_state::mm_cid_word>();
  cid = arch::load_area_i32<0>(w.offset);
  return in_bound(cid, static_cast<std::uint32_t>(if_area_registered(w.bound)));
}

}  // namespace detail

/// The CPU the calling thread runs on, in [0, machine_topology().cpu_id_bound).
///
/// Fast path: one load of the rseq area's cpu_id and one compare with the index space (about
/// 0.3 ns). Slow paths: the thread's first call when percpu registers its own area; in fallback
/// mode, sched_getcpu() (vDSO or syscall); a CPU id beyond the index space (a container's sysfs
/// showing fewer CPUs than the kernel has), which moves the process to fallback mode and is
/// reduced into the index space, so the result always indexes per-CPU data safely. Never
/// negative. Async-signal-safe.
PERCPU_ALWAYS_INLINE int current_cpu() noexcept {
  int cpu;
  if (PERCPU_LIKELY(detail::try_current_cpu(cpu))) return cpu;
  return detail::current_cpu_slow();
}

/// The NUMA node of the CPU the calling thread runs on (rseq node_id, Linux 6.3+; else getcpu()).
/// Two loads from the area (cpu_id checks that the area is registered, then node_id). Never
/// negative. Async-signal-safe.
inline int current_node() noexcept {
  const std::intptr_t off = detail::g_hot.rseq_offset;
  if (PERCPU_LIKELY(off != 0 && detail::g_hot.node_usable)) {
    if (PERCPU_LIKELY(arch::load_area_i32<abi::kOffCpuId>(off) >= 0))
      return arch::load_area_i32<abi::kOffNodeId>(off);
  }
  return detail::current_node_slow();
}

/// The calling thread's concurrency id, in [0, machine_topology().mm_cid_bound).
///
/// The kernel's mm_cid (Linux 6.3+): unique among the process's threads running at the same
/// moment and kept close to 0. Where the kernel lacks mm_cid this is cpu_id (same index space);
/// where rseq is unavailable it is a dense per-thread index (the lowest id free when the thread
/// first asked, released at thread exit), taken modulo the index space when threads outnumber it.
/// One load from the area on the fast path (mm_cid), and the check that the area is registered
/// (hoisted out of a caller's loop: if_area_registered()); an id beyond the index space is
/// handled as in current_cpu(). Never negative.
PERCPU_ALWAYS_INLINE int current_mm_cid() noexcept {
  int cid;
  if (PERCPU_LIKELY(detail::try_current_mm_cid(cid))) return cid;
  return detail::current_mm_cid_slow();
}

/// The calling thread's index in mode M: current_cpu() or current_mm_cid().
template <index_mode M>
PERCPU_ALWAYS_INLINE int current_index() noexcept {
  if constexpr (M == index_mode::cpu_id) {
    return current_cpu();
  } else {
    return current_mm_cid();
  }
}

namespace detail {
/// The fast path of current_index<M>(): try_current_cpu() or try_current_mm_cid().
template <index_mode M>
PERCPU_ALWAYS_INLINE bool try_current_index(int& index) noexcept {
  if constexpr (M == index_mode::cpu_id) {
    return try_current_cpu(index);
  } else {
    return try_current_mm_cid(index);
  }
}
}  // namespace detail

/// A CPU and the NUMA node it belongs to, read together.
struct cpu_node {
  int cpu;
  int node;
};

/// The calling thread's CPU and that CPU's node, read inside one critical section so a migration
/// between the two loads cannot pair one CPU with another CPU's node (about 1 ns). Falls back to
/// getcpu(), which is consistent by itself, when node_id is unusable or rseq is unavailable. The
/// cpu is in [0, machine_topology().cpu_id_bound), as current_cpu()'s.
inline cpu_node current_cpu_node() noexcept {
  const std::intptr_t off = detail::g_hot.rseq_offset;
  if (PERCPU_LIKELY(off != 0 && detail::g_hot.node_usable)) {
    std::int32_t cpu, node;
    if (PERCPU_LIKELY(
            arch::read_cpu_node_pair(off, cpu, node) &&
            detail::in_bound(cpu, static_cast<std::uint32_t>(detail::g_hot.cpu_word >> 32))))
      return {cpu, node};
  }
  cpu_node pair;
  detail::current_cpu_node_slow(pair.cpu, pair.node);
  return pair;
}

}  // namespace percpu
