// glibc's malloc introspection and tuning calls, served by percpu malloc with its own figures
// (introspection.h), so that programs that report their memory report the truth instead of
// glibc's empty heap. Part of libpercpu_malloc.so.
//
// How glibc's fields map (glibc's malloc.h; percpu malloc has one heap, no fastbins, and no
// block mapped on its own):
//   arena    regions mapped for spans              uordblks  bytes held by users
//   fordblks arena - uordblks (cached, free)       keepcost  free spans still resident
//   hblks, hblkhd, smblks, fsmblks, usmblks: 0     ordblks   0 (free spans are not counted)
#include <errno.h>
#include <malloc.h>
#include <stdio.h>

#include <climits>
#include <cstddef>

#include "cancel_disabled.h"
#include "malloc/introspection.h"

namespace pm = percpu::malloc_impl;

#define PERCPU_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

int clamp_int(std::size_t v) {
  return v > static_cast<std::size_t>(INT_MAX) ? INT_MAX : static_cast<int>(v);
}

std::size_t free_bytes(const pm::heap_figures& f) {
  return f.mapped > f.in_use ? f.mapped - f.in_use : 0;
}

}  // namespace

PERCPU_EXPORT struct mallinfo2 mallinfo2() noexcept {
  const pm::heap_figures f = pm::figures();
  struct mallinfo2 m {};
  m.arena = f.mapped;
  m.uordblks = f.in_use;
  m.fordblks = free_bytes(f);
  m.keepcost = f.free_backed;
  return m;
}

// glibc's older form: int fields, which wrap above 2 GiB there; clamped here.
PERCPU_EXPORT struct mallinfo mallinfo() noexcept {
  const struct mallinfo2 m2 = mallinfo2();
  struct mallinfo m {};
  m.arena = clamp_int(m2.arena);
  m.uordblks = clamp_int(m2.uordblks);
  m.fordblks = clamp_int(m2.fordblks);
  m.keepcost = clamp_int(m2.keepcost);
  return m;
}

// glibc's format, to standard error, so that programs and people who read it find its lines.
PERCPU_EXPORT void malloc_stats() noexcept {
  // fprintf() may be a cancellation point, and an unwind out of this noexcept function would
  // end the process; glibc's own malloc_stats() disables cancellation likewise.
  percpu::detail::cancel_disabled no_cancel;
  const pm::heap_figures f = pm::figures();
  fprintf(stderr,
          "Arena 0:\nsystem bytes     = %10zu\nin use bytes     = %10zu\n"
          "Total (incl. mmap):\nsystem bytes     = %10zu\nin use bytes     = %10zu\n"
          "max mmap regions = %10d\nmax mmap bytes   = %10lu\n",
          f.mapped, f.in_use, f.mapped, f.in_use, 0, 0ul);
}

// glibc's XML shape (one heap); "rest" is what is free inside the heap, "current" what is mapped.
PERCPU_EXPORT int malloc_info(int options, FILE* fp) noexcept {
  if (options != 0 || fp == nullptr) {
    errno = EINVAL;
    return -1;
  }
  percpu::detail::cancel_disabled no_cancel;  // fprintf(), as in malloc_stats()
  const pm::heap_figures f = pm::figures();
  const std::size_t free = free_bytes(f);
  fprintf(fp,
          "<malloc version=\"1\">\n<heap nr=\"0\">\n<sizes>\n</sizes>\n"
          "<total type=\"fast\" count=\"0\" size=\"0\"/>\n"
          "<total type=\"rest\" count=\"0\" size=\"%zu\"/>\n"
          "<system type=\"current\" size=\"%zu\"/>\n<system type=\"max\" size=\"%zu\"/>\n"
          "<aspace type=\"total\" size=\"%zu\"/>\n<aspace type=\"mprotect\" size=\"%zu\"/>\n"
          "</heap>\n<total type=\"fast\" count=\"0\" size=\"0\"/>\n"
          "<total type=\"rest\" count=\"0\" size=\"%zu\"/>\n"
          "<total type=\"mmap\" count=\"0\" size=\"0\"/>\n"
          "<system type=\"current\" size=\"%zu\"/>\n<system type=\"max\" size=\"%zu\"/>\n"
          "<aspace type=\"total\" size=\"%zu\"/>\n<aspace type=\"mprotect\" size=\"%zu\"/>\n"
          "</malloc>\n",
          free, f.mapped, f.mapped, f.mapped, f.mapped, free, f.mapped, f.mapped, f.mapped,
          f.mapped);
  return 0;
}

// Returns cached memory to the kernel: every per-CPU cache drained, transfer caches emptied,
// every free span released. 1 when memory was returned, as glibc says. `pad` (bytes glibc
// leaves at the heap's top) has no counterpart: percpu malloc has no top.
PERCPU_EXPORT int malloc_trim(std::size_t pad) noexcept {
  (void)pad;
  return pm::trim() != 0 ? 1 : 0;
}

// glibc's tuning parameters have no counterpart in percpu malloc (no arenas, no top, no mmap
// threshold: large blocks are spans). Every call is accepted and changes nothing; 1 is glibc's
// answer to any parameter, known or not, with a usable value.
PERCPU_EXPORT int mallopt(int param, int value) noexcept {
  (void)param;
  (void)value;
  return 1;
}
