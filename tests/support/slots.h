// Test helper: one word per index, each on its own cache line.
#pragma once

#include <cstdint>
#include <vector>

#include <percpu/topology.h>

namespace percpu::test {

struct alignas(64) slot {
  std::intptr_t value = 0;
  std::intptr_t extra = 0;
};

inline std::vector<slot> make_slots() {
  return std::vector<slot>(machine_topology().cpu_id_bound);
}

inline std::intptr_t sum(const std::vector<slot>& slots) {
  std::intptr_t s = 0;
  for (const auto& x : slots) s += __atomic_load_n(&x.value, __ATOMIC_RELAXED);
  return s;
}

}  // namespace percpu::test
