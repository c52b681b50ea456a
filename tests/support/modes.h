// Test helper: the two index modes as GoogleTest types, for typed test suites.
#pragma once

#include <gtest/gtest.h>

#include <percpu/cpu.h>
#include <type_traits>

namespace percpu::test {

struct CpuId : std::integral_constant<index_mode, index_mode::cpu_id> {};
struct MmCid : std::integral_constant<index_mode, index_mode::mm_cid> {};
using Modes = ::testing::Types<CpuId, MmCid>;

}  // namespace percpu::test
