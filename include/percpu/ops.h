// Per-CPU operations: one attempt each, on the slot of the CPU (or mm_cid) the caller prepared
// for, committing with one store inside an rseq critical section, or through the atomic fallback
// in fallback mode. Plus retry(), the loop every caller needs.
//
// Usage (a per-CPU counter slot array `slots`, one word per CPU, spaced by a stride):
//   percpu::retry<percpu::index_mode::cpu_id>([&](int cpu) {
//     return percpu::add<percpu::index_mode::cpu_id>(&slots[cpu * stride], 1, cpu);
//   });
//
// Preconditions common to all operations: `index` comes from current_index<M>() of the calling
// thread (an index outside the index space is simply never current, so it reports
// index_changed, except in fallback mode where it is not checked: pass valid indices); the words
// are naturally aligned and stay valid for the call.
//
// The shape of retry()'s fast path: read the index from the area, make one attempt inlined into
// the caller (arm, compare the index with the area's and with the section bound, do the work,
// commit), and hand anything else (a failed read, an abort, a compare that failed, fallback
// mode) to an out-of-line cold path that runs the full loop. The fast path thus makes no call
// and saves no register. Its cost above a bare sequence is what keeps it safe: the index-space
// check of the index read, and the section bound compared inside the section
// (g_hot.cpu_section_bound/mm_section_bound: the size of the index space in rseq mode, so a CPU
// id sysfs did not announce touches no slot; 0 from the start of a switch to fallback mode, so
// sections stop); in mm_cid mode also the check that the thread's area is registered. The
// structures' fast paths go one step further with current-index sections (current_ops.h),
// which read the index inside the section and so need no compare of it; these operations serve
// their cold paths and any operation a user writes.
// No section disarms when it ends (the kernel clears rseq_cs lazily, as with librseq): the
// object's unload teardown does it at dlclose() (unload.h). Each operation takes a policy:
// detail::with_fallback (the default) runs the atomic fallback outside rseq mode;
// detail::rseq_only reports index_changed instead, for fast paths whose cold path does the rest.
#pragma once

#define PERCPU_PUBLIC_HEADER 1  // lets it include percpu/internal/

#include "percpu/internal/config.h"  // first: the C++20 check

#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "percpu/cpu.h"
#include "percpu/internal/arch.h"
#include "percpu/internal/fallback.h"
#include "percpu/runtime.h"
#include "percpu/status.h"

namespace percpu {

namespace detail {

/// How an operation behaves outside rseq mode. with_fallback (the default): it runs the atomic
/// fallback, so one call always does the operation in any mode. rseq_only: it reports
/// index_changed instead, for a structure's fast path whose slow path (a full retry() loop)
/// does the rest; that path then makes no call at all.
struct with_fallback {};
struct rseq_only {};

/// The part of dispatch() off the fast path: the process is not in rseq mode (not initialized
/// yet, fallback mode from the start, or a switch since). Runs `fallback_op()` once fallback
/// operations may run, or reports index_changed (just initialized in rseq mode: retry).
/// Out of line, so that the fast path that inlines dispatch() makes no call.
///
/// `fallback_op` comes by value (the operation's arguments, captured by value), so the fast path
/// keeps them in registers: a closure passed by reference would have to live in memory.
template <class FallbackOp>
[[gnu::noinline, gnu::cold]] status dispatch_cold(FallbackOp fallback_op) noexcept {
  if (prepare_fallback()) return fallback_op();
  return status::index_changed;
}

/// Runs `rseq_op(off, idx, field)`, one attempt of a section: `off` is the area's offset from the
/// thread pointer, `idx + field` (field: a std::integral_constant) the offset of the 32-bit field
/// mode M compares (cpu_id; mm_cid mode's field is precomputed in g_hot.mm_cid_index_offset, so
/// no branch picks it). Outside rseq mode, runs `fallback_op()` (with_fallback) or reports
/// index_changed (rseq_only).
///
/// with_fallback tests that percpu has an area offset first: a caller may pass any index before
/// initialization. rseq_only does not: its callers read the index with try_current_index()
/// first, whose success implies the offset (cpu.h).
///
/// The section itself compares the index with the section bound, which is 0 outside rseq mode
/// (it must, for the switch to fallback mode), and reports a failed compare as index_changed,
/// so the mode is read here only after an attempt that did not complete. It is read after an
/// abort too: under a debugger that single-steps or stops at a breakpoint inside the section,
/// every attempt aborts before it reaches the bound compare, and once retry() has switched the
/// process to fallback mode the operation must complete there.
template <index_mode M, class Policy, class RseqOp, class FallbackOp>
PERCPU_ALWAYS_INLINE status dispatch(RseqOp&& rseq_op, FallbackOp&& fallback_op) noexcept {
  static_assert(std::is_same_v<Policy, with_fallback> || std::is_same_v<Policy, rseq_only>,
                "percpu: the policy of an operation is detail::with_fallback or rseq_only");
  // Both written once (load_invariant()): hoisted out of the caller's loop where it inlines this.
  const std::intptr_t off = load_invariant<&hot_state::rseq_offset>();
  // cpu_id: the area's field; mm_cid: the precomputed one (field 0 from its offset).
  const std::intptr_t idx =
      M == index_mode::mm_cid ? load_invariant<&hot_state::mm_cid_index_offset>() : off;
  using field = std::integral_constant<std::uint32_t, M == index_mode::mm_cid ? 0 : abi::kOffCpuId>;
  if constexpr (std::is_same_v<Policy, rseq_only>) {
    return rseq_op(off, idx, field{});
  } else {
    if (PERCPU_LIKELY(off != 0)) {
      const status s = rseq_op(off, idx, field{});
      if (PERCPU_LIKELY(s == status::committed || s == status::compare_failed)) return s;
      if (PERCPU_LIKELY(__atomic_load_n(&g_hot.fallback, __ATOMIC_RELAXED) == kRseqMode)) return s;
    }
    // No area (not initialized, or fallback mode from the start), or the mode has changed.
    return dispatch_cold(std::forward<FallbackOp>(fallback_op));
  }
}

}  // namespace detail

/// Memory ordering of the commit store of the store variants. On x86-64 every store is a
/// release store, so both orders compile to the same code; the distinction matters on weaker
/// architectures (a release commit orders the try-store or copy before the publishing store).
enum class commit_order { relaxed, release };

/// add: *v += count on `index`'s slot, as one commit.
/// Returns committed, or aborted / index_changed (nothing stored: retry).
template <index_mode M, class Policy = detail::with_fallback>
PERCPU_ATTEMPT PERCPU_ALWAYS_INLINE status add(std::intptr_t* v, std::intptr_t count,
                                               int index) noexcept {
  return detail::dispatch<M, Policy>(
      [&](std::intptr_t off, std::intptr_t idx, auto field) PERCPU_LAMBDA_ALWAYS_INLINE {
        return arch::add<decltype(field)::value>(off, idx, v, count, index);
      },
      [=] { return detail::fallback_add(v, count); });
}

/// compare-and-store: if (*v == expect) *v = newv.
/// Returns committed, compare_failed (nothing stored), or aborted / index_changed (retry).
template <index_mode M, class Policy = detail::with_fallback>
PERCPU_ATTEMPT PERCPU_ALWAYS_INLINE status compare_store(std::intptr_t* v, std::intptr_t expect,
                                                         std::intptr_t newv, int index) noexcept {
  return detail::dispatch<M, Policy>(
      [&](std::intptr_t off, std::intptr_t idx, auto field) PERCPU_LAMBDA_ALWAYS_INLINE {
        return arch::compare_store<decltype(field)::value>(off, idx, v, expect, newv, index);
      },
      [=] { return detail::fallback_compare_store(v, expect, newv); });
}

/// compare-compare-and-store: if (*v == expect && *v2 == expect2) *v = newv.
/// Returns committed, compare_failed (nothing stored), or aborted / index_changed (retry).
template <index_mode M, class Policy = detail::with_fallback>
PERCPU_ATTEMPT PERCPU_ALWAYS_INLINE status
compare_compare_store(std::intptr_t* v, std::intptr_t expect, std::intptr_t* v2,
                      std::intptr_t expect2, std::intptr_t newv, int index) noexcept {
  return detail::dispatch<M, Policy>(
      [&](std::intptr_t off, std::intptr_t idx, auto field) PERCPU_LAMBDA_ALWAYS_INLINE {
        return arch::compare_compare_store<decltype(field)::value>(off, idx, v, expect, v2, expect2,
                                                                   newv, index);
      },
      [=] { return detail::fallback_compare_compare_store(v, expect, v2, expect2, newv); });
}

/// free-list pop: if (*v != expect) { *out = *v; *v = *(intptr_t*)(*v + offset) }.
/// `v` is a list head, `offset` the byte offset of the next pointer inside an item, `expect`
/// the empty value (normally 0). Returns committed (*out = the popped item), compare_failed
/// (the head equals expect: empty), or aborted / index_changed (retry).
template <index_mode M, class Policy = detail::with_fallback>
PERCPU_ATTEMPT PERCPU_ALWAYS_INLINE status pop(std::intptr_t* v, std::intptr_t expect,
                                               std::ptrdiff_t offset, std::intptr_t* out,
                                               int index) noexcept {
  return detail::dispatch<M, Policy>(
      [&](std::intptr_t off, std::intptr_t idx, auto field) PERCPU_LAMBDA_ALWAYS_INLINE {
        return arch::pop<decltype(field)::value>(off, idx, v, expect, offset, out, index);
      },
      [=] { return detail::fallback_pop(v, expect, offset, out); });
}

/// compare, then free-list pop: if (*v2 == expect2 && *v != expect) { *out = *v; *v = next },
/// where next = *(intptr_t*)(*v + offset). pop() with a second word that must hold a value
/// (a gate a remote drainer closes, see freelist.h). Returns committed (*out = the popped item),
/// compare_failed (*v2 != expect2, or the list is empty), or aborted / index_changed (retry).
template <index_mode M, class Policy = detail::with_fallback>
PERCPU_ATTEMPT PERCPU_ALWAYS_INLINE status compare_pop(std::intptr_t* v, std::intptr_t expect,
                                                       std::intptr_t* v2, std::intptr_t expect2,
                                                       std::ptrdiff_t offset, std::intptr_t* out,
                                                       int index) noexcept {
  return detail::dispatch<M, Policy>(
      [&](std::intptr_t off, std::intptr_t idx, auto field) PERCPU_LAMBDA_ALWAYS_INLINE {
        return arch::compare_pop<decltype(field)::value>(off, idx, v, expect, v2, expect2, offset,
                                                         out, index);
      },
      [=] { return detail::fallback_compare_pop(v, expect, v2, expect2, offset, out); });
}

/// compare, then free-list push: if (*v2 == expect2) { *(intptr_t*)(item + offset) = *v;
/// *v = item }. `v` is a list head, `v2` a gate that must hold expect2 (see freelist.h),
/// `offset` the byte offset of the next pointer inside an item. The head is read inside the
/// section, so the push needs no expected head and fails only on the gate. The link store may
/// also happen in attempts that abort: the item must be the caller's alone until the commit.
/// Returns committed, compare_failed (*v2 != expect2), or aborted / index_changed (retry).
template <index_mode M, class Policy = detail::with_fallback>
PERCPU_ATTEMPT PERCPU_ALWAYS_INLINE status compare_push(std::intptr_t* v, std::intptr_t* v2,
                                                        std::intptr_t expect2,
                                                        std::ptrdiff_t offset, std::intptr_t item,
                                                        int index) noexcept {
  return detail::dispatch<M, Policy>(
      [&](std::intptr_t off, std::intptr_t idx, auto field) PERCPU_LAMBDA_ALWAYS_INLINE {
        return arch::compare_push<decltype(field)::value>(off, idx, v, v2, expect2, offset, item,
                                                          index);
      },
      [=] { return detail::fallback_compare_push(v, v2, expect2, offset, item); });
}

/// array-stack push: if ((uintptr_t)*count < limit) { base[*count] = value; *count += 1 }.
/// `count` is the stack's count word, `base` its entries, `limit` the count at which it is full
/// (a count at or above it, such as one a remote operation has closed, fails the same test).
/// The count is read inside the section, so no expected count is needed. The entry store may
/// also happen in attempts that abort: nobody may read above the count until the commit
/// publishes the entry (with release order on weakly ordered machines). Returns committed,
/// compare_failed (*count >= limit: the count unchanged; in fallback mode the entry above the
/// count may have been written by an attempt that a concurrent close defeated, which nobody
/// reads), or aborted / index_changed (retry).
template <index_mode M, class Policy = detail::with_fallback>
PERCPU_ATTEMPT PERCPU_ALWAYS_INLINE status array_push(std::intptr_t* count, std::uintptr_t limit,
                                                      std::intptr_t* base, std::intptr_t value,
                                                      int index) noexcept {
  return detail::dispatch<M, Policy>(
      [&](std::intptr_t off, std::intptr_t idx, auto field) PERCPU_LAMBDA_ALWAYS_INLINE {
        return arch::array_push<decltype(field)::value>(off, idx, count, limit, base, value, index);
      },
      [=] { return detail::fallback_array_push(count, limit, base, value); });
}

/// array-stack pop: if ((uintptr_t)(*count - 1) < limit) { *count -= 1; *out = base[*count] }.
/// An empty stack (count 0) wraps above every limit, so `limit` need only exclude the counts
/// that are not a number of entries (a closed count). Count and entry are read inside the
/// section, so a pop and a push of another value in between cannot go unnoticed. Returns
/// committed (*out = the top entry), compare_failed (empty or closed: nothing changed), or
/// aborted / index_changed (retry).
template <index_mode M, class Policy = detail::with_fallback>
PERCPU_ATTEMPT PERCPU_ALWAYS_INLINE status array_pop(std::intptr_t* count, std::uintptr_t limit,
                                                     std::intptr_t* base, std::intptr_t* out,
                                                     int index) noexcept {
  return detail::dispatch<M, Policy>(
      [&](std::intptr_t off, std::intptr_t idx, auto field) PERCPU_LAMBDA_ALWAYS_INLINE {
        return arch::array_pop<decltype(field)::value>(off, idx, count, limit, base, out, index);
      },
      [=] { return detail::fallback_array_pop(count, limit, base, out); });
}

/// compare, try-store, store: if (*v == expect) { *v2 = newv2; *v = newv }. The store to v2 may
/// also happen in attempts that abort, so v2 must be memory nobody reads before the commit
/// publishes it (a free slot above a buffer's count, say). Returns committed, compare_failed,
/// or aborted / index_changed (retry).
template <index_mode M, commit_order O = commit_order::relaxed,
          class Policy = detail::with_fallback>
PERCPU_ATTEMPT PERCPU_ALWAYS_INLINE status
compare_store_store(std::intptr_t* v, std::intptr_t expect, std::intptr_t* v2, std::intptr_t newv2,
                    std::intptr_t newv, int index) noexcept {
  return detail::dispatch<M, Policy>(
      [&](std::intptr_t off, std::intptr_t idx, auto field) PERCPU_LAMBDA_ALWAYS_INLINE {
        return arch::compare_store_store<decltype(field)::value>(off, idx, v, expect, v2, newv2,
                                                                 newv, index);
      },
      [=] { return detail::fallback_compare_store_store(v, expect, v2, newv2, newv); });
}

/// compare, copy, store: if (*v == expect) { memcpy(dst, src, len); *v = newv }. The copy may
/// also happen in attempts that abort (same rule as compare_store_store for dst). `len` is in
/// bytes; the copy moves 8-byte words, then the 0-7 byte tail. Keep it small (up to a few KiB):
/// a copy that outlasts a scheduler tick aborts on every preemption, and enough consecutive
/// aborts move the process to fallback mode (kMaxConsecutiveRetries). Returns committed,
/// compare_failed, or aborted / index_changed (retry).
template <index_mode M, commit_order O = commit_order::relaxed,
          class Policy = detail::with_fallback>
PERCPU_ATTEMPT PERCPU_ALWAYS_INLINE status compare_memcpy_store(std::intptr_t* v,
                                                                std::intptr_t expect, void* dst,
                                                                const void* src, std::size_t len,
                                                                std::intptr_t newv,
                                                                int index) noexcept {
  return detail::dispatch<M, Policy>(
      [&](std::intptr_t off, std::intptr_t idx, auto field) PERCPU_LAMBDA_ALWAYS_INLINE {
        return arch::compare_memcpy_store<decltype(field)::value>(off, idx, v, expect, dst, src,
                                                                  len, newv, index);
      },
      [=] { return detail::fallback_compare_memcpy_store(v, expect, dst, src, len, newv); });
}

namespace detail {
/// True when A is callable with an index (int) and returns a status: what retry() needs. False,
/// rather than a hard error inside std::invoke_result, when A cannot take an int at all, so
/// that retry()'s static_assert gives its message first.
template <class A, class = void>
struct is_attempt : std::false_type {};
template <class A>
struct is_attempt<A, std::enable_if_t<std::is_invocable_v<A&, int>>>
    : std::is_same<std::invoke_result_t<A&, int>, status> {};
}  // namespace detail

/// Consecutive aborts/index changes after which retry() moves the process to fallback mode (see
/// detail::enter_fallback). Reached only when something keeps aborting every attempt, such as a
/// debugger single-stepping through a section; preemption and signal storms abort a few
/// attempts at most.
inline constexpr unsigned kMaxConsecutiveRetries = 1000;

namespace detail {
/// Counts the failure of a structure's fast attempt (aborted or index_changed; nothing for
/// committed or compare_failed) before its slow path retries, so that this_thread_stats() sees
/// every abort, fast path or not. Pass compare_failed when no attempt was made.
inline void count_fast_attempt(status s) noexcept {
  if (s == status::aborted) {
    note_abort();
  } else if (s == status::index_changed) {
    note_index_change();
  }
}

/// How retry() hands its attempt to the cold path. A temporary (the usual lambda written in
/// the call) is copied, after the fast attempt, so what it captured stays in registers on the
/// fast path and a mutable one continues from its state. A named attempt (an lvalue) goes by
/// reference, so its caller sees what every attempt did to it; so does one that cannot be
/// copied.
template <class A>
using cold_copy_t = std::conditional_t<!std::is_lvalue_reference_v<A> &&
                                           std::is_copy_constructible_v<std::decay_t<A>>,
                                       std::decay_t<A>, std::remove_reference_t<A>&>;

/// retry()'s loop after an attempt that did not complete (`first`), or when the fast read of
/// the index failed (`attempted` false): counts, reads the index again (slow path included),
/// and switches to fallback mode after kMaxConsecutiveRetries. Out of line and cold, so that
/// the fast path of retry() makes no call and saves no register.
///
/// `attempt` comes by value when it can be copied (a closure of values and references), so the
/// fast path keeps what it captured in registers; otherwise by reference.
template <index_mode M, class Attempt>
[[gnu::noinline, gnu::cold]] status retry_cold(Attempt attempt, bool attempted,
                                               status first) noexcept {
  status s = first;
  for (unsigned retries = 0;; ++retries) {
    if (attempted) {
      if (s == status::aborted) {
        note_abort();
      } else {
        note_index_change();
      }
      if (PERCPU_UNLIKELY(retries + 1 == kMaxConsecutiveRetries))
        enter_fallback("a critical section aborted 1000 times in a row (debugger?)");
    }
    s = attempt(current_index<M>());
    if (PERCPU_LIKELY(s == status::committed || s == status::compare_failed)) return s;
    attempted = true;
  }
}
}  // namespace detail

/// Runs `attempt(index)` with the calling thread's current index until it returns committed or
/// compare_failed, and returns that. Counts aborts and index changes (this_thread_stats()).
/// After kMaxConsecutiveRetries consecutive retries it switches the process to fallback mode, in
/// which every attempt completes, so the loop always ends.
///
/// The fast path is the index read from the area and one attempt; everything else (the getcpu
/// cache's slow path, counting, retrying) is in detail::retry_cold().
template <index_mode M, class Attempt>
inline status retry(Attempt&& attempt) noexcept {
  static_assert(detail::is_attempt<Attempt>::value,
                "percpu::retry: the attempt must take the index (int) and return the "
                "percpu::status of one operation, e.g. [&](int i) { return "
                "percpu::add<M>(&slots[i], 1, i); }");
  int index;
  if (PERCPU_LIKELY(detail::try_current_index<M>(index))) {
    const status s = attempt(index);
    if (PERCPU_LIKELY(s == status::committed || s == status::compare_failed)) return s;
    return detail::retry_cold<M, detail::cold_copy_t<Attempt>>(attempt, true, s);
  }
  return detail::retry_cold<M, detail::cold_copy_t<Attempt>>(attempt, false, status::index_changed);
}

}  // namespace percpu
