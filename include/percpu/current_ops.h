// The fast paths of the per-CPU structures: one current-index section each
// (internal/arch/x86_64/current_ops.h), a section that reads the calling thread's index itself,
// after arming, so the common case is arm, read the index, check it against the section bound, do
// the work, commit. Whatever the section cannot serve (before initialization, fallback mode, an
// index beyond the index space, an unregistered area, a slot closed by a drain, an abort) it
// reports, and the structure's cold path runs the full loop of ops.h (retry(), the index-passing
// operations, the fallback).
//
// Internal to percpu's structures (namespace detail): user code that writes its own operations
// uses retry() and the operations of ops.h, which take the index as an argument.
#pragma once

#define PERCPU_PUBLIC_HEADER 1  // lets it include percpu/internal/

#include "percpu/internal/config.h"  // first: the C++20 check

#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "percpu/abi.h"
#include "percpu/cpu.h"
#include "percpu/internal/arch.h"
#include "percpu/internal/current_result.h"
#include "percpu/runtime.h"
#include "percpu/status.h"

namespace percpu::detail {

using arch::current_result;
using arch::slot_table;

/// The area field a current-index section of mode M reads: cpu_id, or mm_cid itself (on kernels
/// without mm_cid its section bound is 0, and the cold paths serve mm_cid mode through cpu_id).
template <index_mode M>
inline constexpr std::uint32_t kCurrentField =
    M == index_mode::cpu_id ? abi::kOffCpuId : abi::kOffMmCid;

/// Runs `section(off)` with the area's offset, or reports slow before initialization (no offset
/// yet: an arming store through offset 0 would hit the thread control block) and, in mm_cid
/// mode, for an area mm_cid mode must not use (if_area_registered(): glibc's area of a thread
/// glibc did not register holds mm_cid 0, which the kernel does not guard). The offset is
/// written once, from 0 to its final value, so a load that reads it nonzero reads it final; it
/// and the registration check are computed so the compiler may hoist them out of the caller's
/// loop, as one register (load_invariant(), if_area_registered(); on aarch64 the sections
/// check, arch::kSectionsCheckRegistration). cpu_id mode needs no check
/// here: an unregistered area's cpu_id is negative, which the section's unsigned bound compare
/// rejects.
template <index_mode M, class Section>
PERCPU_ALWAYS_INLINE current_result with_area(Section&& section) noexcept {
  std::intptr_t off = load_invariant<&hot_state::rseq_offset>();
  if constexpr (M == index_mode::mm_cid && !arch::kSectionsCheckRegistration)
    off = static_cast<std::intptr_t>(if_area_registered(static_cast<std::uint64_t>(off)));
  if (PERCPU_UNLIKELY(off == 0)) return current_result::slow;
  return section(off);
}

/// What a structure's cold path counts for a fast attempt that ended with `r` (count_fast_attempt
/// in ops.h): an abort is counted; a section that could not serve here changed no index.
inline status fast_status(current_result r) noexcept {
  return r == current_result::aborted ? status::aborted : status::compare_failed;
}

/// Calls f(t, shift) with the slot table of `slots` and its shift: slot_array::with_table() for
/// a slot array (a constant shift for its own mapping, 0 and a stride for pool slots), or a
/// slot_table as given, with shift 0 (slot i at t.base + i * t.stride).
template <class Slots, class F>
PERCPU_ALWAYS_INLINE current_result with_layout(const Slots& slots, F&& f) noexcept {
  if constexpr (std::is_same_v<Slots, slot_table>) {
    return f(slots, std::integral_constant<unsigned, 0>{});
  } else {
    return slots.with_table(std::forward<F>(f));
  }
}

// The sections below take the slots (a slot_array, or a slot_table) rather than a table, so
// that the area's offset and, in mm_cid mode, its check are computed once, before the layout's
// branch (with_area, then with_layout): GCC hoisted one copy per layout out of a caller's loop
// only for one of them, and computed the other in every iteration.

/// *slot += count on the calling thread's slot of `slots`.
template <index_mode M, class Slots>
PERCPU_ALWAYS_INLINE current_result current_add(const Slots& slots, std::intptr_t count) noexcept {
  return with_area<M>([&](std::intptr_t off) PERCPU_LAMBDA_ALWAYS_INLINE {
    return with_layout(slots, [&](slot_table t, auto shift) PERCPU_LAMBDA_ALWAYS_INLINE {
      return arch::current_add<kCurrentField<M>, decltype(shift)::value>(off, t, count);
    });
  });
}

/// *slot += count on the calling thread's slot of `slots` while *gate is 0; miss when the gate
/// is closed (nonzero). See arch::current_gated_add for the fence that closing pairs with.
template <index_mode M, class Slots>
PERCPU_ALWAYS_INLINE current_result current_gated_add(const Slots& slots, const std::intptr_t* gate,
                                                      std::intptr_t count) noexcept {
  return with_area<M>([&](std::intptr_t off) PERCPU_LAMBDA_ALWAYS_INLINE {
    return with_layout(slots, [&](slot_table t, auto shift) PERCPU_LAMBDA_ALWAYS_INLINE {
      return arch::current_gated_add<kCurrentField<M>, decltype(shift)::value>(off, t, gate, count);
    });
  });
}

/// *slot += count on the calling thread's slot of `slots` while *gate is 0 and the new value
/// stays within [low, low + span]; miss otherwise. See arch::current_bounded_add.
template <index_mode M, class Slots>
PERCPU_ALWAYS_INLINE current_result current_bounded_add(const Slots& slots,
                                                        const std::intptr_t* gate,
                                                        std::intptr_t count, std::intptr_t low,
                                                        std::uintptr_t span) noexcept {
  return with_area<M>([&](std::intptr_t off) PERCPU_LAMBDA_ALWAYS_INLINE {
    return with_layout(slots, [&](slot_table t, auto shift) PERCPU_LAMBDA_ALWAYS_INLINE {
      return arch::current_bounded_add<kCurrentField<M>, decltype(shift)::value>(off, t, gate,
                                                                                 count, low, span);
    });
  });
}

/// taken = *slot, *slot = 0 on the calling thread's slot of `slots` while *gate is 0; miss
/// when it is not. See arch::current_gated_take.
template <index_mode M, class Slots>
PERCPU_ALWAYS_INLINE current_result current_gated_take(const Slots& slots,
                                                       const std::intptr_t* gate,
                                                       std::intptr_t& taken) noexcept {
  return with_area<M>([&](std::intptr_t off) PERCPU_LAMBDA_ALWAYS_INLINE {
    return with_layout(slots, [&](slot_table t, auto shift) PERCPU_LAMBDA_ALWAYS_INLINE {
      return arch::current_gated_take<kCurrentField<M>, decltype(shift)::value>(off, t, gate,
                                                                                taken);
    });
  });
}

/// current_bounded_add, also only while *word <= cap. See arch::current_capped_add.
template <index_mode M, class Slots>
PERCPU_ALWAYS_INLINE current_result current_capped_add(const Slots& slots,
                                                       const std::intptr_t* gate,
                                                       const std::intptr_t* word, std::intptr_t cap,
                                                       std::intptr_t count, std::intptr_t low,
                                                       std::uintptr_t span) noexcept {
  return with_area<M>([&](std::intptr_t off) PERCPU_LAMBDA_ALWAYS_INLINE {
    return with_layout(slots, [&](slot_table t, auto shift) PERCPU_LAMBDA_ALWAYS_INLINE {
      return arch::current_capped_add<kCurrentField<M>, decltype(shift)::value>(
          off, t, gate, word, cap, count, low, span);
    });
  });
}

/// if (*slot == expect) *slot = newv on the calling thread's slot of `slots`; miss when it
/// differs. On commit, `word` is the slot and `index` its index.
template <index_mode M, class Slots>
PERCPU_ALWAYS_INLINE current_result current_compare_store(const Slots& slots, std::intptr_t expect,
                                                          std::intptr_t newv, std::intptr_t*& word,
                                                          int& index) noexcept {
  return with_area<M>([&](std::intptr_t off) PERCPU_LAMBDA_ALWAYS_INLINE {
    return with_layout(slots, [&](slot_table t, auto shift) PERCPU_LAMBDA_ALWAYS_INLINE {
      return arch::current_compare_store<kCurrentField<M>, decltype(shift)::value>(
          off, t, expect, newv, word, index);
    });
  });
}

/// Pops the first item of the calling thread's list in `slots` (slots {head, gate}; items
/// linked through the word `link` bytes into each) into `item`; miss when the list is empty and
/// open, slow when a drain has it closed.
template <index_mode M, class Slots>
PERCPU_ALWAYS_INLINE current_result current_compare_pop(const Slots& slots, std::ptrdiff_t link,
                                                        std::intptr_t& item) noexcept {
  return with_area<M>([&](std::intptr_t off) PERCPU_LAMBDA_ALWAYS_INLINE {
    return with_layout(slots, [&](slot_table t, auto shift) PERCPU_LAMBDA_ALWAYS_INLINE {
      return arch::current_compare_pop<kCurrentField<M>, decltype(shift)::value>(off, t, link,
                                                                                 item);
    });
  });
}

/// Pushes `item` onto the calling thread's list in `slots` (as current_compare_pop); slow when
/// a drain has it closed.
template <index_mode M, class Slots>
PERCPU_ALWAYS_INLINE current_result current_compare_push(const Slots& slots, std::ptrdiff_t link,
                                                         std::intptr_t item) noexcept {
  return with_area<M>([&](std::intptr_t off) PERCPU_LAMBDA_ALWAYS_INLINE {
    return with_layout(slots, [&](slot_table t, auto shift) PERCPU_LAMBDA_ALWAYS_INLINE {
      return arch::current_compare_push<kCurrentField<M>, decltype(shift)::value>(off, t, link,
                                                                                  item);
    });
  });
}

/// Pushes `value` onto the calling thread's stack in `t` (slots {count, entries}) when its
/// count is below `limit`; miss when full, slow when a drain has it closed.
template <index_mode M>
PERCPU_ALWAYS_INLINE current_result current_array_push(slot_table t, std::uintptr_t limit,
                                                       std::intptr_t value) noexcept {
  return with_area<M>([&](std::intptr_t off) PERCPU_LAMBDA_ALWAYS_INLINE {
    return arch::current_array_push<kCurrentField<M>>(off, t, limit, value);
  });
}

/// Pops the top entry of the calling thread's stack in `t` into `out`; miss when empty, slow
/// when a drain has it closed.
template <index_mode M>
PERCPU_ALWAYS_INLINE current_result current_array_pop(slot_table t, std::intptr_t& out) noexcept {
  return with_area<M>([&](std::intptr_t off) PERCPU_LAMBDA_ALWAYS_INLINE {
    return arch::current_array_pop<kCurrentField<M>>(off, t, out);
  });
}

/// Copies `len` bytes from `src` into the record above the count of the calling thread's
/// record stack in `t` (slots {count, records of RecordStride bytes}) when the count is below
/// `limit`, committing the raised count; miss when full, slow when a drain has it closed.
template <index_mode M, std::size_t RecordStride>
PERCPU_ALWAYS_INLINE current_result current_memcpy_push(slot_table t, std::uintptr_t limit,
                                                        const void* src, std::size_t len) noexcept {
  return with_area<M>([&](std::intptr_t off) PERCPU_LAMBDA_ALWAYS_INLINE {
    return arch::current_memcpy_push<kCurrentField<M>, RecordStride>(off, t, limit, src, len);
  });
}

/// Copies the top record's `len` bytes of the calling thread's record stack in `t` into `dst`
/// and commits the lowered count; miss when empty, slow when a drain has it closed.
template <index_mode M, std::size_t RecordStride>
PERCPU_ALWAYS_INLINE current_result current_memcpy_pop(slot_table t, void* dst,
                                                       std::size_t len) noexcept {
  return with_area<M>([&](std::intptr_t off) PERCPU_LAMBDA_ALWAYS_INLINE {
    return arch::current_memcpy_pop<kCurrentField<M>, RecordStride>(off, t, dst, len);
  });
}

}  // namespace percpu::detail
