// Outcome of one attempt at a per-CPU operation.
#pragma once

#define PERCPU_PUBLIC_HEADER 1  // lets it include percpu/internal/

#include "percpu/internal/config.h"  // first: the C++20 check

namespace percpu {

/// Marks a function that makes one attempt at a per-CPU operation: discarding its status is a
/// compile-time warning (-Wunused-result), since an attempt that aborted stored nothing and an
/// unchecked one silently loses its update. retry() is not marked: for add it always returns
/// committed, and ignoring that is fine.
#define PERCPU_ATTEMPT                                                               \
  [[nodiscard(                                                                       \
      "one attempt: it stores nothing when it does not commit; check the status or " \
      "run it inside percpu::retry()")]]

/// What one attempt at a per-CPU operation did.
enum class status {
  /// The commit store happened: the operation took effect.
  committed,
  /// The kernel aborted the critical section (preemption, migration or signal) before the
  /// commit; nothing was stored. Read the index again and retry.
  aborted,
  /// The thread was not on the index (CPU or mm_cid) the caller prepared for, or the process is
  /// leaving rseq mode; nothing was stored. Read the index again and retry.
  index_changed,
  /// A compared value differed from what the caller expected; nothing was stored.
  compare_failed,
};

/// Name of a status: "committed", "aborted", "index_changed" or "compare_failed".
constexpr const char* to_string(status s) noexcept {
  switch (s) {
    case status::committed:
      return "committed";
    case status::aborted:
      return "aborted";
    case status::index_changed:
      return "index_changed";
    case status::compare_failed:
      return "compare_failed";
  }
  return "?";
}

}  // namespace percpu
