// Folding the slots of a structure whose gate is closed (percpu_ref's kill(), percpu_counter's
// drain): after the fence, no section should commit on them, so their sum can be taken.
#pragma once

#include <cstdint>

#include "percpu/remote.h"
#include "percpu/slot_array.h"

namespace percpu::detail {

/// Sets every slot of `slots` to zero and returns their sum (wrapping). Precondition: the
/// sections that write them check a gate that is closed, and try_fence_all() has returned
/// since it closed. Each slot is taken with an exchange, and after a second fence once more: on
/// Linux 7.2 under emulation (8 vCPUs) an add was seen to commit just after the fence returned,
/// and a load-then-store fold lost it; an exchange loses nothing, and the second pass takes
/// what landed meanwhile.
inline std::uintptr_t take_closed_slots(slot_array<std::intptr_t>& slots) noexcept {
  std::uintptr_t sum = 0;
  for (int pass = 0; pass < 2; ++pass) {
    if (pass == 1) (void)try_fence_all();
    for (int i = 0; i < slots.size(); ++i)
      sum += static_cast<std::uintptr_t>(__atomic_exchange_n(&slots[i], 0, __ATOMIC_ACQ_REL));
  }
  return sum;
}

}  // namespace percpu::detail
