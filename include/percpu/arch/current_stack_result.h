// What every architecture's current-index stack sections share: the limit of a count and the
// outcome of one section (see x86_64/current_stack.h for the sections themselves).
#pragma once

#include <cstdint>

namespace percpu::arch {

/// Counts above this are not counts but a closed stack (kCountClosed): the sections leave them
/// to the generic operations, which wait for the drain.
inline constexpr std::uint32_t kMaxStackCount = 0xFFFFF;

/// What a current-index stack section did.
enum class stack_result { done, slow, aborted };

}  // namespace percpu::arch
