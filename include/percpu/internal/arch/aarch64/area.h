// aarch64 access to the calling thread's rseq area: the area lies at a fixed offset from the
// thread pointer (TPIDR_EL0), so a field is one load from thread pointer + offset.
#pragma once

#if !defined(PERCPU_PUBLIC_HEADER) && !defined(PERCPU_BUILDING)
#error "<percpu/internal/arch/aarch64/area.h> is internal: include <percpu/percpu.h>"
#endif

#include <cstdint>

namespace percpu::arch {

/// The thread pointer (TPIDR_EL0).
inline char* thread_pointer() noexcept {
  return static_cast<char*>(__builtin_thread_pointer());
}

/// Loads the 32-bit field at byte `Field` of the area that starts `rseq_offset` bytes from the
/// thread pointer. One load; volatile because the kernel rewrites the field on migration.
template <std::uint32_t Field>
inline std::int32_t load_area_i32(std::intptr_t rseq_offset) noexcept {
  return *reinterpret_cast<const volatile std::int32_t*>(thread_pointer() + rseq_offset + Field);
}

/// Disarms the thread's critical section: area->rseq_cs = 0 (see ../x86_64/area.h: what
/// prepare_unload() does).
inline void clear_rseq_cs(std::intptr_t rseq_offset) noexcept {
  asm volatile("str xzr, [%[p]]" : : [p] "r"(thread_pointer() + rseq_offset + 8) : "memory");
}

}  // namespace percpu::arch
