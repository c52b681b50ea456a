// What every architecture's critical sections share: the `rseq_cs` descriptor and the tables
// that list sections and early exits (plain assembler data, the same on x86-64 and aarch64),
// and the statuses a section returns after its asm goto. The instructions are in each
// architecture's sections.h (see x86_64/sections.h for the rules: "?" COMDAT flag, numeric
// local labels passed as strings).
#pragma once

#if !defined(PERCPU_PUBLIC_HEADER) && !defined(PERCPU_BUILDING)
#error "<percpu/internal/rseq_tables.h> is internal: include <percpu/percpu.h>"
#endif

#ifdef __cplusplus
#include "percpu/internal/unload_teardown.h"  // every object with sections gets its unload teardown
#endif                                        // C objects get theirs from internal/c_counter.h

/// Descriptor `desc` for a section [start, end) aborting to `abort` (Linux
/// include/uapi/linux/rseq.h: version 0, flags 0, start_ip, post_commit_offset, abort_ip),
/// 32-byte aligned in __rseq_cs and listed in __rseq_cs_ptr_array.
#define PERCPU_RSEQ_DESCRIPTOR(desc, start, end, abort) \
  ".pushsection __rseq_cs, \"aw?\"\n\t"                 \
  ".balign 32\n\t" desc                                 \
  ":\n\t"                                               \
  ".long 0x0, 0x0\n\t"                                  \
  ".quad " start "f, (" end "f - " start "f), " abort   \
  "f\n\t"                                               \
  ".popsection\n\t"                                     \
  ".pushsection __rseq_cs_ptr_array, \"aw?\"\n\t"       \
  ".quad " desc                                         \
  "b\n\t"                                               \
  ".popsection\n\t"

/// Records an early exit from the section starting at `start` (a forward label) to `exit`.
#define PERCPU_RSEQ_EXIT_POINT(start, exit)           \
  ".pushsection __rseq_exit_point_array, \"aw?\"\n\t" \
  ".quad " start "f, " exit                           \
  "\n\t"                                              \
  ".popsection\n\t"

/// What every section returns after its asm goto: committed when control falls through,
/// aborted from the abort handler, index_changed from the early exit. Sections with a compare
/// use PERCPU_RETURN_STATUSES_WITH_CMPFAIL.
///
/// No exit disarms (rseq_cs keeps pointing at the descriptor): the kernel clears it at the
/// thread's next preemption, signal or migration, when it finds the instruction pointer outside
/// the section, as librseq and tcmalloc leave it. The one hazard is code unloaded while a thread
/// still points at one of its descriptors: every object that includes these headers disarms such
/// threads when dlclose() unloads it (percpu/internal/unload_teardown.h, by the __rseq_cs range the
/// descriptors above are emitted into); code freed otherwise needs prepare_unload() (unload.h).
#define PERCPU_RETURN_STATUSES \
  return status::committed;    \
  aborted:                     \
  return status::aborted;      \
  moved:                       \
  return status::index_changed;

/// PERCPU_RETURN_STATUSES plus the `cmpfail:` exit of the sections that compare: returns
/// compare_failed.
#define PERCPU_RETURN_STATUSES_WITH_CMPFAIL \
  PERCPU_RETURN_STATUSES                    \
  cmpfail:                                  \
  return status::compare_failed;
