// percpu malloc's fast paths, inline: the exported malloc, free and operator new/delete
// (src/malloc/interpose.cpp) each compile to one function that reads the size class or the
// pagemap entry, checks, and runs one per-CPU cache section, with no call or jump on the way.
// Everything else (refills, flushes, large blocks, foreign pointers, faults) is the out-of-line
// slow paths of allocator.cpp.
#pragma once

#include <cstddef>
#include <cstdint>

#include "malloc/cpu_cache.h"
#include "malloc/free_tag.h"
#include "malloc/page_heap.h"
#include "malloc/size_classes.h"

namespace percpu::malloc_impl {
namespace slow {

/// Writes "percpu malloc: <what> (0x<p>)" to stderr and aborts, without allocating.
[[noreturn]] void fatal(const char* what, const void* p) noexcept;

/// fatal() for free's fast path. It never returns either, but is not declared noreturn, so that
/// the fast path reaches it with a jump and needs no stack frame for a call.
void free_fault(const char* what, const void* p) noexcept;

/// fatal() for an object popped from a cache without its cached tag (free_tag.h). It never
/// returns either; not declared noreturn, so that malloc's fast path reaches it with a jump.
void* pop_fault(const void* p) noexcept;

/// A small object of class `cls` when the cache's section did not commit; `fast_aborted` says
/// the section aborted (counted in the statistics). NULL with ENOMEM when out of memory.
void* allocate_small(std::size_t cls, bool fast_aborted) noexcept;

/// A block above the size classes, page-aligned; NULL with ENOMEM when refused.
void* allocate_large_block(std::size_t size) noexcept;

/// Returns small object `p` of class `cls`, checked and tagged already, when the cache's
/// section did not commit (full, closed, aborted).
void give_back(std::size_t cls, void* p, bool fast_aborted) noexcept;

/// give_back() of `p` after free's section did not commit: the class is read again from the
/// pagemap, so that the fast path keeps no register for it across the section.
void give_back_freed(void* p, bool fast_aborted) noexcept;

/// free() of what the pagemap does not name as a small object: NULL, a large block, another
/// allocator's block (to the foreign allocator) or a fault. `s` is the entry's span, if any.
void deallocate_other(void* p, span* s) noexcept;

}  // namespace slow

/// Hands `p`, just popped from a cache, to a user: true when it carried its cached tag (which is
/// cleared: the object is the user's now); false when it did not (a double free or a stray
/// free put it there: the caller stops the process with slow::pop_fault).
__attribute__((always_inline)) inline bool take_for_user(void* p) noexcept {
  std::uint64_t& word = free_tag_word(p);
  if (PERCPU_UNLIKELY(word != span_object_cached_tag(p))) return false;
  word = 0;
  return true;
}

/// malloc(size): an object of the smallest class holding `size` bytes from the per-CPU cache,
/// else the slow paths. NULL with ENOMEM when out of memory.
__attribute__((always_inline)) inline void* allocate_inline(std::size_t size) noexcept {
  std::size_t cls;
  if (PERCPU_LIKELY(size <= detail::kSmallLimit)) {
    cls = detail::small_class_of(size);
    if (cls == 0) __builtin_unreachable();  // every size up to kSmallLimit has a class
  } else {
    cls = size_class_of(size);
    if (PERCPU_UNLIKELY(cls == 0)) return slow::allocate_large_block(size);
  }
  void* p;
  const arch::current_result r = cache_pop_fast(cls, p);
  if (PERCPU_LIKELY(r == arch::current_result::committed))
    return PERCPU_LIKELY(take_for_user(p)) ? p : slow::pop_fault(p);
  return slow::allocate_small(cls, r == arch::current_result::aborted);
}

/// The per-CPU cache's part of allocate_inline() alone, for sizes up to kSmallLimit: the object
/// when the cache's section commits (a fault found in it stops the process through a tail call
/// to slow::pop_fault), else `refused(r == aborted)`, the caller's slow path, also in tail
/// position. A caller with more to do after a failure than allocate_inline's slow paths
/// (operator new's new-handler loop) then still needs no stack frame on its fast path.
template <typename Refused>
__attribute__((always_inline)) inline void* allocate_cached(
    std::size_t size, Refused refused) noexcept(noexcept(refused(false))) {
  if (PERCPU_UNLIKELY(size > detail::kSmallLimit)) return refused(false);
  void* p;
  const arch::current_result r = cache_pop_fast(detail::small_class_of(size), p);
  if (PERCPU_LIKELY(r == arch::current_result::committed))
    return PERCPU_LIKELY(take_for_user(p)) ? p : slow::pop_fault(p);
  return refused(r == arch::current_result::aborted);
}

/// free(p): a small object back onto the per-CPU cache after its check (the start of an object
/// of a span), with its cached tag, else the slow paths. A fault found here stops the process
/// (slow::fatal); a double free is found at the object's next pop or return to its span.
__attribute__((always_inline)) inline void deallocate_inline(void* p) noexcept {
  // The pagemap entry names the size class and the object's place in its span: the checks and
  // the push need no load of the span. NULL reads as an entry of class 0 (page 0 never holds a
  // span: map_aligned), so its test is on the slow path.
  const std::uintptr_t e = page_heap().entry_of(p);
  const std::size_t cls = pagemap::entry::size_class(e);
  if (PERCPU_UNLIKELY(cls == 0)) return slow::deallocate_other(p, pagemap::entry::span_of(e));
  if (PERCPU_UNLIKELY(!is_object_start(cls, pagemap::entry::offset_in_span(e, p))))
    return slow::free_fault("free(): invalid pointer, inside an object or past its span's last one",
                            p);
  // The cached tag, written without reading the word (free_tag.h): a double free or a stray
  // pointer is caught where the object next leaves the caches, before it reaches a second user.
  free_tag_word(p) = span_object_cached_tag(p);
  const arch::current_result r = cache_push_fast(cls, p);
  if (PERCPU_LIKELY(r == arch::current_result::committed)) return;
  slow::give_back_freed(p, r == arch::current_result::aborted);
}

}  // namespace percpu::malloc_impl
