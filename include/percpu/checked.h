// Membership checks of checked builds: which items are stored in a percpu structure right now,
// so that pushing an item twice is reported instead of corrupting a list.
#pragma once

#define PERCPU_PUBLIC_HEADER 1  // lets it include percpu/internal/

#include "percpu/internal/config.h"

/// PERCPU_CHECKED selects the default of the structures' Checked parameter: 1 in builds without
/// NDEBUG (debug builds), 0 otherwise. Define it to 0 or 1 to override.
#ifndef PERCPU_CHECKED
#ifdef NDEBUG
#define PERCPU_CHECKED 0
#else
#define PERCPU_CHECKED 1
#endif
#endif

namespace percpu {

/// Default of the Checked template parameter of freelist and buffer (see PERCPU_CHECKED).
inline constexpr bool kCheckedDefault = PERCPU_CHECKED != 0;

namespace detail {

/// Records that `item` is now stored in a structure. Returns false, recording nothing, when it
/// already is (a double push). Async-signal-safe (a spinlock with signals blocked and
/// mmap-backed storage, no malloc); costs about a microsecond.
PERCPU_API bool checked_insert(const void* item) noexcept;

/// Records that `item` left its structure. Returns false when it was not recorded.
PERCPU_API bool checked_erase(const void* item) noexcept;

}  // namespace detail
}  // namespace percpu
