/* The functions libpercpu_malloc.so exports besides the standard allocation API (C and C++).
 * Link with -lpercpu_malloc, or look them up with dlsym() when the library is preloaded. */
#ifndef PERCPU_MALLOC_H
#define PERCPU_MALLOC_H

#ifdef __cplusplus
extern "C" {
#endif

/* Writes percpu malloc's statistics as text to file descriptor `fd`: RSS, the page heap's
 * layers (bytes mapped, in spans, free, released, large, metadata), the per-CPU caches' budget
 * and committed bytes, maintenance counts, and per size class the spans, free objects, objects
 * in the transfer and per-CPU caches, capacities, refills and flushes. Allocates nothing; safe
 * at exit. The same text PERCPU_MALLOC_STATS=1 prints to stderr when the process exits. */
void percpu_malloc_stats_print(int fd);

#ifdef __cplusplus
}
#endif

#endif /* PERCPU_MALLOC_H */
