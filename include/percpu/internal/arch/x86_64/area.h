// x86-64 access to the calling thread's rseq area: the area lies at a fixed offset from the
// thread pointer (the %fs base), so a field is one %fs-relative load.
#pragma once

#if !defined(PERCPU_PUBLIC_HEADER) && !defined(PERCPU_BUILDING)
#error "<percpu/internal/arch/x86_64/area.h> is internal: include <percpu/percpu.h>"
#endif

#include <cstdint>

#include "percpu/internal/getcpu_asm.h"

namespace percpu::arch {

/// Loads the 32-bit field at byte `Field` of the area that starts `rseq_offset` bytes from the
/// thread pointer. One instruction; volatile because the kernel rewrites the field on migration.
template <std::uint32_t Field>
inline std::int32_t load_area_i32(std::intptr_t rseq_offset) noexcept {
  std::int32_t value;
  asm volatile(PERCPU_ASM_LOAD_AREA_I32
               : [value] "=r"(value)
               : [field] "i"(Field), [off] "r"(rseq_offset));
  return value;
}

/// Disarms the thread's critical section: area->rseq_cs = 0. Sections do not call it (the
/// kernel clears a descriptor pointer left behind once the thread is outside the section); it
/// serves prepare_unload(): once code that ran a section is freed, a pointer left at its
/// descriptor would make the kernel read unmapped memory at the next preemption and kill the
/// thread. (dlclose() needs no call: unload_teardown.h.)
inline void clear_rseq_cs(std::intptr_t rseq_offset) noexcept {
  asm volatile("movq $0, %%fs:8(%[off])" : : [off] "r"(rseq_offset) : "memory");
}

/// The thread pointer (%fs base), read from the TCB's self pointer at %fs:0.
inline char* thread_pointer() noexcept {
  char* tp;
  asm("movq %%fs:0, %0" : "=r"(tp));
  return tp;
}

}  // namespace percpu::arch
