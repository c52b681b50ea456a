/* percpu's C API: userspace per-CPU data through restartable sequences (rseq), for C programs
 * and for every language that calls C (ctypes, cgo, Rust, P/Invoke, Java's FFM).
 *
 * C11 (and C++: the same header compiles as C++20). Link with -lpercpu (pkg-config percpu, or
 * CMake's percpu::percpu). docs/c_api.md is the manual; each C function below wraps the C++
 * structure it names, with the same contract, costs and thread safety.
 *
 * - The getcpu cache (percpu_current_cpu() and friends) is inline: the same instructions as in
 *   C++; so is percpu_counter_add() in C on x86-64 (its critical section is the C++ one). The
 *   structures are opaque handles; their other operations are calls into libpercpu.
 * - Errors: functions returning int return 0 (or a count or a boolean, as documented) on
 *   success and a negative errno value on failure; constructors return NULL and set errno.
 *   -EINVAL (EINVAL) also answers a NULL handle, a handle of another type and a destroyed one
 *   (each handle carries a tag, cleared when it is destroyed; a handle used after destroy is
 *   undefined behaviour all the same, as after free()). No C++ exception ever crosses this API:
 *   std::bad_alloc is -ENOMEM, a bad argument -EINVAL or -ERANGE, a misuse -EINVAL, no
 *   possible fence -EOPNOTSUPP.
 * - Index modes: PERCPU_CPU_ID indexes per-CPU data by the CPU the thread runs on,
 *   PERCPU_MM_CID by the kernel's compact concurrency id (memory follows the threads that run).
 * - Misuse the C++ structures leave undetected in release builds stays undetected here (a
 *   percpu_rwsem_up_read() or up_write() of a lock not held, a percpu_ref_put() without its
 *   get: the structure is then broken, as in C++); what C++ reports (a double kill, a pool
 *   double free, a checked list's double push) is an error value here.
 * - Without rseq (old kernel, seccomp, valgrind, qemu-user) everything works through the
 *   fallback, with the same results; percpu_info() says which mode runs and why. */
#ifndef PERCPU_H
#define PERCPU_H

#define PERCPU_PUBLIC_HEADER 1 /* lets it include percpu/internal/ */

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
#include "percpu/cpu.h"
#else
#include "percpu/internal/c_getcpu.h"
#endif
#include "percpu/internal/c_counter.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PERCPU_C_API __attribute__((visibility("default")))

/** How per-CPU data is indexed (percpu::index_mode). */
typedef enum percpu_index_mode
#ifdef __cplusplus
    /* In C++ every int is then a value of the type, as in C, so that the library refuses any
     * other mode a C caller passes (EINVAL) without undefined behaviour. */
    : int
#endif
{
  /** By the CPU the thread runs on: indices in [0, cpu_id_bound). */
  PERCPU_CPU_ID = 0,
  /** By the kernel's per-process concurrency id (Linux 6.3+; cpu_id before): indices in
   * [0, mm_cid_bound), kept close to 0. */
  PERCPU_MM_CID = 1
} percpu_index_mode;

/* ---- The getcpu cache -------------------------------------------------------------------- */

/** The CPU the calling thread runs on, in [0, cpu_id_bound): one load of the rseq area's cpu_id
 * and one compare (about 0.3 ns, inlined). A hint: the thread may migrate right after. Never
 * negative; async-signal-safe. Slow path (first call, fallback mode): sched_getcpu(). */
static inline int percpu_current_cpu(void) {
#ifdef __cplusplus
  return ::percpu::current_cpu();
#else
  return percpu_internal_current_cpu();
#endif
}

/** The calling thread's concurrency id (the kernel's mm_cid, Linux 6.3+; cpu_id before; a dense
 * per-thread id in fallback mode), in [0, mm_cid_bound). Inline, one load; never negative;
 * async-signal-safe. */
static inline int percpu_current_mm_cid(void) {
#ifdef __cplusplus
  return ::percpu::current_mm_cid();
#else
  return percpu_internal_current_mm_cid();
#endif
}

/** The NUMA node of the CPU the calling thread runs on (rseq node_id, Linux 6.3+; else
 * getcpu()). Inline, two loads; never negative; async-signal-safe. */
static inline int percpu_current_node(void) {
#ifdef __cplusplus
  return ::percpu::current_node();
#else
  return percpu_internal_current_node();
#endif
}

/** A CPU and its node, read together. */
typedef struct percpu_cpu_node {
  int cpu;
  int node;
} percpu_cpu_node;

/** The calling thread's CPU and that CPU's node, read inside one critical section, so a
 * migration between the two loads cannot pair one CPU with another CPU's node. A call (the
 * section is C++'s); about 1 ns more than percpu_current_cpu(). Async-signal-safe. */
PERCPU_C_API percpu_cpu_node percpu_current_cpu_node(void);

/* ---- What runs, and why ------------------------------------------------------------------ */

/** The process's rseq state (percpu::registration() and machine_topology()). */
struct percpu_info {
  /** 1 when per-CPU operations run as rseq critical sections, 0 in fallback mode. */
  int rseq_active;
  /** Who registered the area percpu reads: "glibc", "percpu" or "none" (static strings). */
  const char* area_owner;
  /** Why the process is in fallback mode; "" in rseq mode. Truncated to fit. */
  char fallback_reason[256];
  /** errno of the failed rseq(2) registration behind fallback mode, 0 if none. */
  int registration_errno;
  /** Why glibc's area is not used, when it is not; "" otherwise. Truncated to fit. */
  char glibc_reason[256];
  /** glibc's __rseq_size (0 if absent), and the kernel's AT_RSEQ_FEATURE_SIZE, in bytes. */
  unsigned glibc_rseq_size;
  unsigned long feature_size;
  /** 1 when the area's node_id / mm_cid fields hold kernel-written values. */
  int node_id_usable;
  int mm_cid_usable;
  /** Sizes of the two index spaces (possible CPUs: highest id + 1; the mm_cid bound). */
  int cpu_id_bound;
  int mm_cid_bound;
  /** Counts of possible CPUs, online CPUs and possible NUMA nodes. */
  int possible_cpus;
  int online_cpus;
  int nodes;
};

/** Fills `*info` (initializing percpu if needed). Returns 0, or -EINVAL for a NULL `info`,
 * -ENOMEM. Thread-safe; not async-signal-safe. */
PERCPU_C_API int percpu_info(struct percpu_info* info);

/* ---- Counter (percpu::counter<int64_t, M>) ------------------------------------------------ */

/** A per-CPU counter: add goes to the calling thread's slot (one critical section, no atomic
 * instruction, no shared cache line); load sums the slots. */
typedef struct percpu_counter percpu_counter;

/** A zero counter in `mode`. NULL with errno EINVAL (unknown mode) or ENOMEM. Thread-safe. */
PERCPU_C_API percpu_counter* percpu_counter_create(percpu_index_mode mode);
/** Frees it (NULL: nothing). No thread may use it any more. */
PERCPU_C_API void percpu_counter_destroy(percpu_counter* c);
/** Adds `n` (negative subtracts; arithmetic wraps as uint64_t). Returns 0, or -EINVAL for a bad
 * handle. Never loses an update, also across preemption, migration and signals;
 * async-signal-safe. Inline in C on x86-64 (the C++ add's section, about 0.8-0.9 ns in a loop); a
 * call elsewhere (C++, aarch64, and through the FFI: libpercpu exports it). */
#ifdef PERCPU_INTERNAL_C_INLINE_ADD
static inline int percpu_counter_add(percpu_counter* c, int64_t n) {
  return percpu_internal_counter_add(c, n);
}
#else
PERCPU_C_API int percpu_counter_add(percpu_counter* c, int64_t n);
#endif
/** Stores the sum of the slots in `*value`: every add that completed before the call. Returns
 * 0, or -EINVAL (bad handle, NULL value). Async-signal-safe. */
PERCPU_C_API int percpu_counter_load(const percpu_counter* c, int64_t* value);
/** Takes the sum: stores it in `*taken` and subtracts exactly that, so a concurrent add is
 * either taken or stays. Returns 0 or -EINVAL. */
PERCPU_C_API int percpu_counter_reset(percpu_counter* c, int64_t* taken);

/* ---- Batched counter (percpu::percpu_counter<M>: the kernel's percpu_counter) ------------- */

/** The kernel's percpu_counter contract: add on the calling CPU's slot until it reaches the
 * batch, then fold into one shared count; read() is one load within error_bound() of the exact
 * sum(); limited_add() never passes its limit. */
typedef struct percpu_batched_counter percpu_batched_counter;

/** A zero counter in `mode` with `batch` (0: the default, max(64, 2 * slots); else 1 to 2^40).
 * NULL with errno EINVAL (mode, batch) or ENOMEM. */
PERCPU_C_API percpu_batched_counter* percpu_batched_counter_create(percpu_index_mode mode,
                                                                   int64_t batch);
/** Frees it (NULL or a bad handle: nothing). No thread may use it any more. */
PERCPU_C_API void percpu_batched_counter_destroy(percpu_batched_counter* c);
/** Adds `n`. Returns 0 or -EINVAL. Never waits; async-signal-safe. */
PERCPU_C_API int percpu_batched_counter_add(percpu_batched_counter* c, int64_t n);
/** The shared count, one load: within percpu_batched_counter_error_bound() of the sum. Returns
 * 0 or -EINVAL (bad handle, NULL value). */
PERCPU_C_API int percpu_batched_counter_read(const percpu_batched_counter* c, int64_t* value);
/** The exact sum of every add that completed before the call. Returns 0 or -EINVAL. */
PERCPU_C_API int percpu_batched_counter_sum(const percpu_batched_counter* c, int64_t* value);
/** Compares the exact count with `x`: stores -1, 0 or 1 in `*result`; cheap far from x.
 * Returns 0 or -EINVAL. */
PERCPU_C_API int percpu_batched_counter_compare(const percpu_batched_counter* c, int64_t x,
                                                int* result);
/** Adds `n` if the exact count then stays at most `limit` (n <= 0 always adds): returns 1 when
 * added, 0 when refused (nothing added), -EINVAL (bad handle), -EOPNOTSUPP when the answer
 * needed a fence and none is possible (nothing added). */
PERCPU_C_API int percpu_batched_counter_limited_add(percpu_batched_counter* c, int64_t n,
                                                    int64_t limit);
/** The most read() may differ from sum(): (batch - 1) * (slots + 2). -EINVAL for a bad handle. */
PERCPU_C_API int64_t percpu_batched_counter_error_bound(const percpu_batched_counter* c);

/* ---- Free list (percpu::freelist) --------------------------------------------------------- */

/** What a free list links: embed it in your item (first member, or use offsetof to get back).
 * The list never allocates and never touches an item it does not hold. */
struct percpu_freelist_node {
  struct percpu_freelist_node* next;
};

/** A per-CPU LIFO list of percpu_freelist_node, one list per index. */
typedef struct percpu_freelist percpu_freelist;

/** Flag of percpu_freelist_create(): record which nodes are stored, so that a double push is
 * refused (-EEXIST) instead of linking a node into two places (slower). */
#define PERCPU_FREELIST_CHECKED 1u

/** An empty list in `mode`; `flags`: 0 or PERCPU_FREELIST_CHECKED. NULL with errno EINVAL or
 * ENOMEM. */
PERCPU_C_API percpu_freelist* percpu_freelist_create(percpu_index_mode mode, unsigned flags);
/** Frees the list; nodes still in it stay the caller's (the list forgets them; a checked list
 * reads their next pointers to do so: free such nodes after, not before). */
PERCPU_C_API void percpu_freelist_destroy(percpu_freelist* l);
/** Pushes `node` onto the calling thread's list: one critical section, async-signal-safe.
 * Returns 0, -EINVAL (bad handle, NULL node), -EEXIST (checked list: already stored). */
PERCPU_C_API int percpu_freelist_push(percpu_freelist* l, struct percpu_freelist_node* node);
/** Pops from the calling thread's list: a node, or NULL when that list is empty (errno
 * untouched) or the handle is bad (errno EINVAL). Async-signal-safe. */
PERCPU_C_API struct percpu_freelist_node* percpu_freelist_pop(percpu_freelist* l);
/** Takes the calling thread's whole list (linked through next, NULL-terminated); NULL when
 * empty. */
PERCPU_C_API struct percpu_freelist_node* percpu_freelist_pop_all(percpu_freelist* l);
/** Empties index `index`'s list, also while its threads push and pop, and returns its nodes
 * (NULL-terminated). NULL with errno: ERANGE (index outside [0, slots)), EOPNOTSUPP (no fence
 * possible; nothing taken), EINVAL (bad handle); NULL with errno 0 when it was empty. */
PERCPU_C_API struct percpu_freelist_node* percpu_freelist_drain(percpu_freelist* l, int index);
/** Number of lists (the index space of the mode); -EINVAL for a bad handle. */
PERCPU_C_API int percpu_freelist_slots(const percpu_freelist* l);

/* ---- Pool of per-CPU objects (percpu::pool) ----------------------------------------------- */

/** Strided per-CPU memory: an object has one copy per index, copy i at
 * base + i * percpu_pool_stride(). Memory is touched only where an index uses it. */
typedef struct percpu_pool percpu_pool;

/** A pool in `mode`: `stride` bytes between an object's copies (0: 64 KiB; else a multiple of
 * the page size, at most 1 GiB: objects are at most this big), `slots` copies (0: the index
 * space; never fewer). NULL with errno EINVAL or ENOMEM. */
PERCPU_C_API percpu_pool* percpu_pool_create(percpu_index_mode mode, size_t stride, int slots);
/** Frees the pool and every object in it. */
PERCPU_C_API void percpu_pool_destroy(percpu_pool* p);
/** A zeroed object of `size` bytes (1 to the stride, 8-byte aligned) in every slot; returns
 * slot 0's copy (the base). NULL with errno EINVAL (size) or ENOMEM. Thread-safe. */
PERCPU_C_API void* percpu_pool_alloc(percpu_pool* p, size_t size);
/** Returns the object at `base` of `size` bytes (as allocated). Returns 0, or -EINVAL (bad
 * handle; a base this pool did not hand out or already freed; another size). NULL: 0. */
PERCPU_C_API int percpu_pool_free(percpu_pool* p, void* base, size_t size);
/** Bytes between an object's copies; 0 for a bad handle. */
PERCPU_C_API size_t percpu_pool_stride(const percpu_pool* p);
/** Number of copies of each object; -EINVAL for a bad handle. */
PERCPU_C_API int percpu_pool_slots(const percpu_pool* p);

/** Copy `index` of the object at `base` in a pool of `stride`: base + index * stride. */
static inline void* percpu_pool_slot(void* base, size_t stride, int index) {
  return (char*)base + (size_t)index * stride;
}

/* ---- Reader-writer semaphore (percpu::percpu_rwsem: the kernel's percpu-rwsem) ------------ */

/** Readers take it with one critical section on their CPU's slot (no shared write); a writer
 * closes the per-CPU path, fences every CPU and waits for readers to leave. */
typedef struct percpu_rwsem percpu_rwsem;

/** An unlocked semaphore in `mode`. NULL with errno EINVAL (mode) or ENOMEM. Thread-safe. */
PERCPU_C_API percpu_rwsem* percpu_rwsem_create(percpu_index_mode mode);
/** Frees it; nobody may hold or wait for it. */
PERCPU_C_API void percpu_rwsem_destroy(percpu_rwsem* s);
/** Takes it shared (waits while a writer holds or waits). Returns 0 or -EINVAL. */
PERCPU_C_API int percpu_rwsem_down_read(percpu_rwsem* s);
/** Takes it shared if no writer holds or waits: 1 taken, 0 not, -EINVAL. */
PERCPU_C_API int percpu_rwsem_down_read_trylock(percpu_rwsem* s);
/** Releases a shared hold (any thread may release). Returns 0 or -EINVAL. */
PERCPU_C_API int percpu_rwsem_up_read(percpu_rwsem* s);
/** Takes it exclusive, waiting for readers to leave. Returns 0, -EINVAL, or -EOPNOTSUPP when no
 * fence is possible (not taken). */
PERCPU_C_API int percpu_rwsem_down_write(percpu_rwsem* s);
/** Takes it exclusive if free: 1 taken, 0 not, -EINVAL, -EOPNOTSUPP. */
PERCPU_C_API int percpu_rwsem_down_write_trylock(percpu_rwsem* s);
/** Releases the exclusive hold. Returns 0 or -EINVAL. */
PERCPU_C_API int percpu_rwsem_up_write(percpu_rwsem* s);

/* ---- Reference count (percpu::percpu_ref: the kernel's percpu_ref) ------------------------ */

/** get and put are one critical section on the caller's slot until kill() switches the count to
 * one shared atomic; the release callback then runs exactly once, when it reaches zero. */
typedef struct percpu_ref percpu_ref;

/** The callback percpu_ref_put() runs when the count reaches zero after percpu_ref_kill(), with
 * the `arg` given to percpu_ref_create(); it may destroy the ref. */
typedef void (*percpu_ref_release_fn)(percpu_ref* ref, void* arg);

/** A live ref holding one reference (the initial one, which kill drops). `release` may be NULL.
 * NULL with errno EINVAL or ENOMEM. */
PERCPU_C_API percpu_ref* percpu_ref_create(percpu_index_mode mode, percpu_ref_release_fn release,
                                           void* arg);
/** Frees it (no callback runs). */
PERCPU_C_API void percpu_ref_destroy(percpu_ref* r);
/** Takes a reference. Returns 0 or -EINVAL. */
PERCPU_C_API int percpu_ref_get(percpu_ref* r);
/** Takes a reference unless the count reached zero: 1 taken, 0 not, -EINVAL. */
PERCPU_C_API int percpu_ref_tryget(percpu_ref* r);
/** Takes a reference unless the ref was killed: 1 taken, 0 not, -EINVAL. */
PERCPU_C_API int percpu_ref_tryget_live(percpu_ref* r);
/** Drops a reference; after kill, the one that reaches zero runs the callback. 0 or -EINVAL. */
PERCPU_C_API int percpu_ref_put(percpu_ref* r);
/** Switches to the shared count and drops the initial reference. Returns 0, -EINVAL (bad handle,
 * killed twice), -EOPNOTSUPP (no fence possible: nothing changed). */
PERCPU_C_API int percpu_ref_kill(percpu_ref* r);
/** Back to per-CPU mode holding the initial reference again (after kill, before the release).
 * Returns 0 or -EINVAL (bad handle; a live or released ref). */
PERCPU_C_API int percpu_ref_resurrect(percpu_ref* r);
/** 1 when the count is zero (killed and every reference put), 0 if not, -EINVAL. */
PERCPU_C_API int percpu_ref_is_zero(const percpu_ref* r);
/** 1 once killed (dying or released), 0 if live, -EINVAL. */
PERCPU_C_API int percpu_ref_is_dying(const percpu_ref* r);

/* ---- Histogram (percpu::histogram) -------------------------------------------------------- */

/** A per-CPU log-linear histogram (HdrHistogram's layout): record is four critical sections on
 * the caller's CPU, never waiting; a snapshot folds every CPU while threads record. */
typedef struct percpu_histogram percpu_histogram;
/** What a snapshot holds: counts per bucket, the count, the sum; its queries. */
typedef struct percpu_histogram_snapshot percpu_histogram_snapshot;

/** A zero histogram in `mode` for values in [0, max_value] (0: one hour in ns), with
 * 2^precision_bits sub-buckets per power of two (-1: 7; else 0 to 14; any other value EINVAL).
 * NULL with errno EINVAL
 * (mode, layout beyond 2^18 buckets) or ENOMEM. */
PERCPU_C_API percpu_histogram* percpu_histogram_create(percpu_index_mode mode, uint64_t max_value,
                                                       int precision_bits);
/** Frees it (NULL or a bad handle: nothing); its snapshots stay valid. No thread may record. */
PERCPU_C_API void percpu_histogram_destroy(percpu_histogram* h);
/** Records `value` (above max_value: counted above the range). Returns 0 or -EINVAL.
 * Async-signal-safe; never waits. */
PERCPU_C_API int percpu_histogram_record(percpu_histogram* h, uint64_t value);
/** Every record completed before the call, folded into a new snapshot; with `reset` nonzero the
 * histogram starts again from zero (no record lost or counted twice). NULL with errno EINVAL,
 * ENOMEM, EOPNOTSUPP (no fence possible: nothing lost, the next snapshot has them). */
PERCPU_C_API percpu_histogram_snapshot* percpu_histogram_snapshot_take(percpu_histogram* h,
                                                                       int reset);
/** Frees a snapshot (NULL or a bad handle: nothing). */
PERCPU_C_API void percpu_histogram_snapshot_destroy(percpu_histogram_snapshot* s);
/** Number of values, their sum (wrapping), values above the range; 0 for a bad handle. */
PERCPU_C_API uint64_t percpu_histogram_snapshot_count(const percpu_histogram_snapshot* s);
PERCPU_C_API uint64_t percpu_histogram_snapshot_sum(const percpu_histogram_snapshot* s);
PERCPU_C_API uint64_t percpu_histogram_snapshot_above_range(const percpu_histogram_snapshot* s);
/** Lowest and highest recorded value to the layout's precision; 0 when empty or bad. */
PERCPU_C_API uint64_t percpu_histogram_snapshot_min(const percpu_histogram_snapshot* s);
PERCPU_C_API uint64_t percpu_histogram_snapshot_max(const percpu_histogram_snapshot* s);
/** The value at quantile `q` in [0, 1] (HdrHistogram's rank rule) into `*value`. Returns 0,
 * -EINVAL (bad handle, NULL value, q outside [0, 1] or NaN). */
PERCPU_C_API int percpu_histogram_snapshot_value_at_quantile(const percpu_histogram_snapshot* s,
                                                             double q, uint64_t* value);
/** Number of values whose bucket lies wholly at or below `v`; 0 for a bad handle. */
PERCPU_C_API uint64_t
percpu_histogram_snapshot_count_at_or_below(const percpu_histogram_snapshot* s, uint64_t v);

#ifdef __cplusplus
}
#endif

#endif /* PERCPU_H */
