// Process-wide rseq state: who registered the rseq area, which fields are usable, whether the
// process runs in rseq mode or in fallback mode, and why.
//
// Registration rules (design.md): glibc 2.35+ registers an area for every thread and exports
// __rseq_offset/__rseq_size; percpu uses it whenever __rseq_size > 0. Otherwise percpu registers
// its own area (initial-exec TLS, 64-byte aligned) on each thread's first use and unregisters it
// at thread exit. If registration is impossible the process runs in fallback mode: the same
// operations done with atomic instructions, same results, slower.
#pragma once

#define PERCPU_PUBLIC_HEADER 1  // lets it include percpu/internal/

#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "percpu/abi.h"
#include "percpu/internal/config.h"
#include "percpu/internal/getcpu_asm.h"

namespace percpu {

/// Who registered the rseq area that percpu reads.
enum class area_owner {
  none,    ///< nobody: fallback mode
  glibc,   ///< glibc's per-thread area (__rseq_size > 0)
  percpu,  ///< percpu's own initial-exec TLS area
};

/// Human-readable name of an owner: "none", "glibc" or "percpu".
PERCPU_API const char* to_string(area_owner owner) noexcept;

/// A snapshot of the process's rseq state, filled once at initialization (plus the fallback
/// fields, which change if the process later leaves rseq mode).
struct registration_info {
  area_owner owner = area_owner::none;
  /// True when per-CPU operations use the atomic fallback instead of critical sections.
  bool fallback = false;
  /// Why the process is in fallback mode (empty in rseq mode).
  std::string fallback_reason;
  /// errno of the failed rseq(2) registration behind fallback mode, 0 if none.
  int registration_errno = 0;
  /// Why glibc's area is not used, when it is not (empty when owner == glibc).
  std::string glibc_reason;
  /// True when the weak __rseq_offset/__rseq_size symbols resolved at link/load time.
  bool glibc_symbols = false;
  /// glibc's __rseq_size as read (0 if the symbols are absent), in bytes.
  std::uint32_t glibc_rseq_size = 0;
  /// getauxval(AT_RSEQ_FEATURE_SIZE): bytes of struct rseq the kernel fills; 0 if absent.
  unsigned long feature_size = 0;
  /// getauxval(AT_RSEQ_ALIGN): required alignment of the area in bytes; 0 if absent.
  unsigned long alignment = 0;
  /// Bytes of the registered area percpu relies on (glibc's extent or percpu's registered length).
  std::uint32_t area_extent = 0;
  /// Which optional fields hold kernel-written values (abi::decide_usable_fields).
  abi::usable_fields fields;
  /// Offset of the area from the thread pointer, in bytes (same in every thread).
  std::intptr_t rseq_offset = 0;
};

/// Returns the process's rseq state, initializing percpu if needed. Thread-safe.
PERCPU_API registration_info registration();

/// True when per-CPU operations run as rseq critical sections, false in fallback mode.
PERCPU_API bool rseq_active() noexcept;

/// Counters of the slow paths, for the calling thread or the whole process.
struct op_stats {
  std::uint64_t aborts = 0;         ///< critical sections the kernel aborted
  std::uint64_t index_changes = 0;  ///< sections that found the thread on another CPU/mm_cid
  std::uint64_t fallback_ops = 0;   ///< operations done by the atomic fallback
};

/// Slow-path counters of the calling thread (cheap: thread-local).
PERCPU_API op_stats this_thread_stats() noexcept;

/// Aborts and index changes of all threads since start (fallback_ops stays 0 here: they are
/// counted per thread only, to keep the fallback free of shared writes).
PERCPU_API op_stats process_stats() noexcept;

/// Number of process-wide switches from rseq mode to fallback mode (0 or 1).
PERCPU_API unsigned fallback_switches() noexcept;

namespace detail {

/// The state the inline fast paths read. One cache line, written only during initialization and
/// by the one-way switch to fallback mode.
struct alignas(64) hot_state {
  /// Offset of the rseq area from the thread pointer; 0 until percpu is initialized. Written
  /// once (never 0 afterwards: the area cannot lie at the thread pointer), so a nonzero value is
  /// final whatever order a reader loaded it in.
  std::intptr_t rseq_offset;
  /// Offset from the thread pointer of the field mm_cid mode reads: the area's mm_cid, or its
  /// cpu_id where the kernel lacks mm_cid; 0 until percpu is initialized. Precomputed so that
  /// mm_cid mode's fast paths and sections address the field without a branch. Written once,
  /// like rseq_offset.
  std::intptr_t mm_cid_index_offset;
  /// Offset from the thread pointer of the 32-bit field that is negative exactly while the
  /// calling thread's area is unregistered in a way mm_cid mode must check (see
  /// if_area_registered()); 0 until percpu is initialized. Written once, like rseq_offset.
  ///  - glibc's area: its cpu_id. glibc registers each thread before the thread runs any code
  ///    (2.35+ ends the process when a new thread cannot register) and never unregisters it
  ///    while it runs; an area it did not register (a thread made by raw clone(), one whose
  ///    registration failed) stays unregistered. So its sign is constant for the thread's life.
  ///  - percpu's own area: its cpu_id_start, never negative. The area keeps mm_cid at
  ///    kMmCidUnregistered while it is not registered (its initial value, and stored again after
  ///    each unregistration, signals blocked), outside every index space, so the sections' bound
  ///    compare rejects an unregistered own area instead; its registration state may change under
  ///    a caller's loop (the first use registers it), which a hoisted check could not follow.
  std::intptr_t registration_offset;
  /// kRseqMode, kSwitching (leaving rseq mode, fence in progress), kFallbackMode or
  /// kUninitialized. Read by the operations after an attempt that did not complete, to pick the
  /// fallback; the sections themselves read the section bounds below.
  std::uint32_t fallback;
  /// Nonzero when node_id is usable.
  std::uint32_t node_usable;
  /// Nonzero when mm_cid is usable; otherwise mm_cid mode is served by cpu_id.
  std::uint32_t mm_cid_usable;
  /// The bounds every critical section compares its index with, in place of a mode check:
  /// the index spaces' sizes (machine_topology().cpu_id_bound, mm_cid_bound) while the process
  /// is in rseq mode, 0 before initialization, in fallback mode, and from the start of a switch
  /// to it (which zeroes them before its fence). A section whose index is at or beyond its bound
  /// leaves before any access, so the one compare both keeps slots inside the index space and stops
  /// sections once a switch has begun; structures' fast paths, whose current-index sections read
  /// the index themselves (current_ops.h), therefore need no bound check of their own.
  std::uint32_t cpu_section_bound;
  std::uint32_t mm_section_bound;
  /// The bound of mm_cid mode's current-index sections (internal/arch/x86_64/current_ops.h), which
  /// read the area's own mm_cid field, not the precomputed one: mm_section_bound where the kernel
  /// fills mm_cid (Linux 6.3+), 0 where it does not, so that those sections leave and the
  /// structures' slow paths serve mm_cid mode through cpu_id there. Zeroed with the other section
  /// bounds. cpu_id mode's current-index sections use cpu_section_bound.
  std::uint32_t mm_cid_field_bound;
  /// The getcpu cache's words: the low 32 bits hold an offset from the thread pointer (cpu_word:
  /// the area's; mm_cid_word: mm_cid mode's precomputed field, see mm_cid_index_offset), the
  /// high 32 bits the index space's size (cpu_id_bound, mm_cid_bound). Stored as one word, so
  /// that a bound read nonzero comes with its offset (load_getcpu_word()), and hoisted.
  /// 0 until initialize() stores them, last; they stay 0 if an offset does not fit in 32 bits
  /// (no platform places TLS that far), and the getcpu cache then always takes its slow path.
  std::uint64_t cpu_word;
  std::uint64_t mm_cid_word;
};
static_assert(sizeof(hot_state) == 64, "the fast paths' state is one cache line");
// Its symbol has C's name, percpu_hot_state: the C header's inline getcpu reads it
// (internal/c_getcpu.h), and a copy relocation must see one symbol, not an alias of it.
PERCPU_API extern hot_state g_hot __asm__("percpu_hot_state");

// How the asm statements below address a word of g_hot: PERCPU_HOT_AT/PERCPU_HOT_ADDR
// (internal/getcpu_asm.h, whose text the C fast paths share).

/// Loads the 8-byte word of g_hot at `Field` (a pointer to member), a word written once, from
/// 0 to its final value (the offsets, cpu_word, mm_cid_word), as a value
/// the compiler may treat as invariant: an asm statement without memory operands, which it may
/// hoist out of the caller's loops and merge with other loads of the word, across calls and
/// memory clobbers (so the fast paths inlined in a loop load the offset and the bound once, not
/// once an iteration, even though their slow paths are calls). A load hoisted above
/// initialize() reads 0, which every user treats as "not initialized" and sends to its slow
/// path: correct, only slower, for the rest of that loop. The section bounds, which a switch to
/// fallback mode changes, are never read this way.
template <auto Field>
PERCPU_ALWAYS_INLINE auto load_invariant() noexcept {
  using word = std::remove_cv_t<std::remove_reference_t<decltype(g_hot.*Field)>>;
  static_assert(sizeof(word) == 8, "load_invariant reads one 8-byte word");
  word v;
#if defined(__x86_64__)
  asm(PERCPU_ASM_LOAD_INVARIANT : "=r"(v) : [w] PERCPU_HOT_ADDR(&(g_hot.*Field)));
#elif defined(__aarch64__)
  asm(PERCPU_ASM_LOAD_INVARIANT : "=r"(v) : "r"(&(g_hot.*Field)));
#else
#error "percpu: x86-64 or aarch64"
#endif
  return v;
}

/// `value` if the calling thread's area may serve mm_cid mode, else 0. It may not when it is
/// glibc's area and glibc did not register it for this thread (its cpu_id is negative, its
/// mm_cid 0: a valid-looking id the kernel does not guard). `value` is a word the caller treats
/// as "not initialized" when 0 (rseq_offset, a getcpu word's bound), so one test serves both.
///
/// One asm statement without memory operands and of one output, like load_invariant(): the
/// answer is constant for the life of the thread (see hot_state::registration_offset), so the
/// compiler may hoist it, with `value`, out of the caller's loop, which then keeps one register
/// and pays no load for the check. (GCC already assumes that a function runs on one thread
/// throughout: it keeps thread-local addresses across calls.) The statement loads
/// registration_offset itself, after `value` (its input; x86-64 keeps loads in order, aarch64
/// orders it by an address dependency on `value`): initialize() stores the offset before the
/// words `value` comes from, so a nonzero `value` comes with the final offset. (A zero `value`
/// gives 0 whatever the offset read.)
PERCPU_ALWAYS_INLINE std::uint64_t if_area_registered(std::uint64_t value) noexcept {
  std::uint64_t out;  // the offset, then the result
#if defined(__x86_64__)
  // No input but `value` and the word's address (given a zero as an input too, GCC picked a
  // register that held 0 only inside the loop, and kept the statement there).
  asm(PERCPU_ASM_IF_AREA_REGISTERED
      : [out] "=&r"(out)
      : [v] "r"(value), [at] PERCPU_HOT_ADDR(&g_hot.registration_offset)
      : "cc");
#elif defined(__aarch64__)
  asm(PERCPU_ASM_IF_AREA_REGISTERED
      : [out] "=&r"(out)
      : [v] "r"(value), [at] "r"(&g_hot.registration_offset), [tp] "r"(__builtin_thread_pointer())
      : "cc");
#else
#error "percpu: x86-64 or aarch64"
#endif
  return out;
}

/// A getcpu word's two halves: the offset of the field to read, the index space's size.
struct getcpu_parts {
  std::intptr_t offset;
  std::uint32_t bound;
};

/// Loads the halves of the getcpu word at `Field` (cpu_word or mm_cid_word), so that the
/// compiler may hoist both out of the caller's loop as they are, with no sign extension or shift
/// left in the loop: the loop's fast path is the field's load and one compare. On x86-64, two
/// asm statements of one output each and without memory operands (as load_invariant(); GCC
/// hoists no asm of two outputs, and left the split of one load in the loop): the bound first,
/// then the offset, whose statement takes the bound as an input so it comes second. The word is
/// written by one 8-byte store and x86-64 keeps loads in order, so a load of the offset after a
/// nonzero bound sees the offset stored with it. On aarch64, one load, split in C++.
template <auto Field>
PERCPU_ALWAYS_INLINE getcpu_parts load_getcpu_word() noexcept {
  static_assert(sizeof(g_hot.*Field) == 8, "a getcpu word is 8 bytes");
  std::uint32_t bound;
  std::intptr_t offset;
#if defined(__x86_64__)
  asm(PERCPU_ASM_GETCPU_BOUND : "=r"(bound) : [w] PERCPU_HOT_ADDR(&(g_hot.*Field)));
  asm(PERCPU_ASM_GETCPU_OFFSET : "=r"(offset) : [w] PERCPU_HOT_ADDR(&(g_hot.*Field)), "r"(bound));
#elif defined(__aarch64__)
  // One load, split in C++: GCC hoists the split as well here.
  const std::uint64_t word = load_invariant<Field>();
  offset = static_cast<std::int32_t>(word);
  bound = static_cast<std::uint32_t>(word >> 32);
#else
#error "percpu: x86-64 or aarch64"
#endif
  return {offset, bound};
}

/// cpu_word or mm_cid_word for {offset, bound}.
constexpr std::uint64_t getcpu_word(std::intptr_t offset, std::uint32_t bound) noexcept {
  return static_cast<std::uint32_t>(static_cast<std::int32_t>(offset)) |
         static_cast<std::uint64_t>(bound) << 32;
}

/// The section bound of the index field at `Field` (abi::kOffCpuId: cpu_id mode; 0: mm_cid
/// mode's precomputed field), for the sections' bound compare.
template <std::uint32_t Field>
PERCPU_ALWAYS_INLINE std::uint32_t& section_bound() noexcept {
  return Field == abi::kOffCpuId ? g_hot.cpu_section_bound : g_hot.mm_section_bound;
}

/// The section bound of a current-index section reading the area field at `Field`
/// (abi::kOffCpuId or abi::kOffMmCid).
template <std::uint32_t Field>
PERCPU_ALWAYS_INLINE std::uint32_t& current_bound() noexcept {
  static_assert(Field == abi::kOffCpuId || Field == abi::kOffMmCid,
                "current-index sections read cpu_id or mm_cid");
  return Field == abi::kOffCpuId ? g_hot.cpu_section_bound : g_hot.mm_cid_field_bound;
}

inline constexpr std::uint32_t kRseqMode = 0;
inline constexpr std::uint32_t kSwitching = 1;
inline constexpr std::uint32_t kFallbackMode = 2;
/// Initial value of g_hot.fallback: every operation leaves the inline path until initialize().
inline constexpr std::uint32_t kUninitialized = 3;

/// Initializes percpu (idempotent, thread-safe). Runs from a constructor before main as well.
PERCPU_API void initialize() noexcept;

/// Initializes like initialize() unless initialization is already under way (possibly further up
/// this thread's stack: an allocator that initialization itself calls into). Returns true once
/// initialized, false while another initialization runs.
PERCPU_API bool try_initialize() noexcept;

/// Slow paths of the getcpu cache: initialize, register this thread, or ask the kernel. An id
/// the kernel reports beyond the index space moves the process to fallback mode (whose
/// operations are correct on any slot) and is reduced into the index space.
PERCPU_API int current_cpu_slow() noexcept;
PERCPU_API int current_node_slow() noexcept;
PERCPU_API int current_mm_cid_slow() noexcept;
/// Fallback of the consistent pair: getcpu() (one vDSO call or system call).
PERCPU_API void current_cpu_node_slow(int& cpu, int& node) noexcept;

/// Moves the whole process to fallback mode (one way): marks the switch, aborts every critical
/// section in flight (membarrier RSEQ fence, or a migration sweep over the CPUs where membarrier is
/// unavailable), then lets fallback operations run. `reason` is recorded for registration().
PERCPU_API void enter_fallback(const char* reason) noexcept;

/// Unregisters percpu's own area of the calling thread with the length it was registered with
/// (what the thread-exit hook does). Returns 0, EINVAL when this thread has no percpu-owned
/// registration, or the errno of rseq(2). The next getcpu-cache call registers again.
PERCPU_API int unregister_this_thread() noexcept;

/// Delay-injection loop counts for points 1-3 inside every critical section (index 0 unused),
/// read only by builds with PERCPU_INJECT_DELAYS (see
/// percpu/internal/arch/x86_64/sections.h); `percpu stress` sets them. Units: iterations of a
/// two-instruction loop (about 0.3 ns each).
PERCPU_API extern std::uint32_t g_inject_loops[4];

/// True when this translation unit's critical sections contain injection points.
#ifdef PERCPU_INJECT_DELAYS
inline constexpr bool kInjectDelays = true;
#else
inline constexpr bool kInjectDelays = false;
#endif

/// Slow-path accounting, called off the fast path.
PERCPU_API void note_abort() noexcept;
PERCPU_API void note_index_change() noexcept;

}  // namespace detail
}  // namespace percpu
