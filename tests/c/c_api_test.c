/* The C API (<percpu.h>) from C: every structure from several threads with conservation
 * checks, the getcpu cache against the kernel's answer, and every error path a C caller can
 * reach. C11, built with -Wall -Wextra -Werror -pedantic by gcc and by clang
 * (tests/CMakeLists.txt). Runs in each mode of the suite; PERCPU_EXPECT (glibc, percpu, fallback)
 * says which mode it must find. Exit status 0 when every check held; each failure prints its line.
 */
#define _GNU_SOURCE
#include <percpu.h>

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures;

#define CHECK(cond)                                                            \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
      __atomic_add_fetch(&failures, 1, __ATOMIC_RELAXED);                      \
    }                                                                          \
  } while (0)

enum { kThreads = 4, kIterations = 100000 };

/* Runs fn(arg, i) on kThreads threads and joins them. */
static void run_threads(void* (*fn)(void*), void* args, size_t arg_size) {
  pthread_t t[kThreads];
  int i;
  for (i = 0; i < kThreads; ++i)
    CHECK(pthread_create(&t[i], NULL, fn, (char*)args + (size_t)i * arg_size) == 0);
  for (i = 0; i < kThreads; ++i) pthread_join(t[i], NULL);
}

static const percpu_index_mode kModes[2] = {PERCPU_CPU_ID, PERCPU_MM_CID};

/* ---- info and the getcpu cache ---- */

static void test_info(void) {
  struct percpu_info info;
  const char* expect = getenv("PERCPU_EXPECT");
  CHECK(percpu_info(NULL) == -EINVAL);
  CHECK(percpu_info(&info) == 0);
  CHECK(info.cpu_id_bound >= 1 && info.mm_cid_bound >= 1);
  CHECK(info.possible_cpus >= 1 && info.online_cpus >= 1 && info.nodes >= 1);
  CHECK(info.area_owner != NULL);
  if (expect != NULL && strcmp(expect, "fallback") == 0) {
    CHECK(info.rseq_active == 0);
    CHECK(strcmp(info.area_owner, "none") == 0);
    CHECK(info.fallback_reason[0] != '\0');
  } else if (expect != NULL && (strcmp(expect, "glibc") == 0 || strcmp(expect, "percpu") == 0)) {
    CHECK(info.rseq_active == 1);
    CHECK(strcmp(info.area_owner, expect) == 0);
    CHECK(info.fallback_reason[0] == '\0');
  }
  printf("info: %s, area %s%s%s\n", info.rseq_active ? "rseq" : "fallback", info.area_owner,
         info.fallback_reason[0] ? ", " : "", info.fallback_reason);
}

static void test_getcpu(void) {
  struct percpu_info info;
  cpu_set_t allowed, one;
  int cpu, checked = 0;
  CHECK(percpu_info(&info) == 0);
  CHECK(sched_getaffinity(0, sizeof(allowed), &allowed) == 0);
  /* Pinned to each allowed CPU in turn, the cache must name it, and the pair must agree. */
  for (cpu = 0; cpu < CPU_SETSIZE && checked < 8; ++cpu) {
    percpu_cpu_node pair;
    int id, mm_cid, node;
    if (!CPU_ISSET(cpu, &allowed)) continue;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    if (sched_setaffinity(0, sizeof(one), &one) != 0) continue;
    ++checked;
    id = percpu_current_cpu();
    CHECK(id == cpu);
    CHECK(id == sched_getcpu());
    mm_cid = percpu_current_mm_cid();
    CHECK(mm_cid >= 0 && mm_cid < info.mm_cid_bound);
    node = percpu_current_node();
    CHECK(node >= 0);
    pair = percpu_current_cpu_node();
    CHECK(pair.cpu == cpu && pair.node == node);
  }
  CHECK(checked > 0);
  CHECK(sched_setaffinity(0, sizeof(allowed), &allowed) == 0);
}

/* ---- counter ---- */

struct counter_arg {
  percpu_counter* c;
  percpu_batched_counter* b;
  percpu_histogram* h;
  int index;
};

static void* counter_worker(void* p) {
  struct counter_arg* a = p;
  int i;
  for (i = 0; i < kIterations; ++i) {
    if (percpu_counter_add(a->c, 3) != 0) __atomic_add_fetch(&failures, 1, __ATOMIC_RELAXED);
    if (percpu_counter_add(a->c, -1) != 0) __atomic_add_fetch(&failures, 1, __ATOMIC_RELAXED);
  }
  return NULL;
}

static void test_counter(void) {
  int m;
  CHECK(percpu_counter_create((percpu_index_mode)7) == NULL && errno == EINVAL);
  CHECK(percpu_counter_add(NULL, 1) == -EINVAL);
  for (m = 0; m < 2; ++m) {
    struct counter_arg args[kThreads];
    percpu_counter* c = percpu_counter_create(kModes[m]);
    int64_t v = -1, taken = -1;
    int i;
    CHECK(c != NULL);
    if (c == NULL) continue;
    for (i = 0; i < kThreads; ++i) args[i].c = c;
    run_threads(counter_worker, args, sizeof(args[0]));
    CHECK(percpu_counter_load(c, &v) == 0);
    CHECK(v == (int64_t)kThreads * kIterations * 2);
    CHECK(percpu_counter_load(c, NULL) == -EINVAL);
    CHECK(percpu_counter_reset(c, &taken) == 0 && taken == v);
    CHECK(percpu_counter_load(c, &v) == 0 && v == 0);
    /* A handle of another type is refused, not misread. */
    CHECK(percpu_counter_add((percpu_counter*)(void*)&args[0], 1) == -EINVAL);
    percpu_counter_destroy(c);
  }
  percpu_counter_destroy(NULL);
}

/* ---- batched counter ---- */

static void* batched_worker(void* p) {
  struct counter_arg* a = p;
  int i;
  for (i = 0; i < kIterations; ++i)
    if (percpu_batched_counter_add(a->b, 1) != 0)
      __atomic_add_fetch(&failures, 1, __ATOMIC_RELAXED);
  return NULL;
}

static void test_batched_counter(void) {
  int m, cmp = 2;
  CHECK(percpu_batched_counter_create(PERCPU_CPU_ID, -1) == NULL && errno == EINVAL);
  CHECK(percpu_batched_counter_create(PERCPU_CPU_ID, (int64_t)1 << 41) == NULL && errno == EINVAL);
  CHECK(percpu_batched_counter_error_bound(NULL) == -EINVAL);
  for (m = 0; m < 2; ++m) {
    struct counter_arg args[kThreads];
    percpu_batched_counter* b = percpu_batched_counter_create(kModes[m], 0);
    int64_t sum = -1, read = -1, bound;
    int i, added = 0, r;
    CHECK(b != NULL);
    if (b == NULL) continue;
    for (i = 0; i < kThreads; ++i) args[i].b = b;
    run_threads(batched_worker, args, sizeof(args[0]));
    CHECK(percpu_batched_counter_sum(b, &sum) == 0);
    CHECK(sum == (int64_t)kThreads * kIterations);
    CHECK(percpu_batched_counter_read(b, &read) == 0);
    bound = percpu_batched_counter_error_bound(b);
    CHECK(bound > 0 && read >= sum - bound && read <= sum + bound);
    CHECK(percpu_batched_counter_compare(b, sum, &cmp) == 0 && cmp == 0);
    CHECK(percpu_batched_counter_compare(b, sum + 1, &cmp) == 0 && cmp == -1);
    /* limited_add never passes its limit: 10 more fit under sum + 10, the 11th is refused. */
    for (i = 0; i < 20; ++i) {
      r = percpu_batched_counter_limited_add(b, 1, sum + 10);
      CHECK(r == 0 || r == 1);
      if (r == 1) ++added;
    }
    CHECK(added == 10);
    CHECK(percpu_batched_counter_sum(b, &sum) == 0 && sum == (int64_t)kThreads * kIterations + 10);
    percpu_batched_counter_destroy(b);
  }
}

/* ---- free list ---- */

static int slots_of(percpu_freelist* l) {
  return percpu_freelist_slots(l);
}

struct item {
  struct percpu_freelist_node node; /* first member: a node is its item */
  int owner;
};

struct list_arg {
  percpu_freelist* l;
  struct item* items; /* 1000 of its own */
  long popped;
};

static void* list_worker(void* p) {
  struct list_arg* a = p;
  int round, i;
  for (i = 0; i < 1000; ++i)
    if (percpu_freelist_push(a->l, &a->items[i].node) != 0)
      __atomic_add_fetch(&failures, 1, __ATOMIC_RELAXED);
  /* Pop and push back: the lists shuffle nodes between threads and CPUs. */
  for (round = 0; round < 50; ++round) {
    struct percpu_freelist_node* n = percpu_freelist_pop(a->l);
    if (n != NULL && percpu_freelist_push(a->l, n) != 0)
      __atomic_add_fetch(&failures, 1, __ATOMIC_RELAXED);
  }
  return NULL;
}

static void test_freelist(void) {
  int m, checked;
  CHECK(percpu_freelist_create(PERCPU_CPU_ID, 2) == NULL && errno == EINVAL);
  errno = 0;
  CHECK(percpu_freelist_pop(NULL) == NULL && errno == EINVAL);
  for (checked = 0; checked < 2; ++checked) {
    for (m = 0; m < 2; ++m) {
      struct list_arg args[kThreads];
      struct item* items = calloc((size_t)kThreads * 1000, sizeof(struct item));
      percpu_freelist* l = percpu_freelist_create(kModes[m], checked ? PERCPU_FREELIST_CHECKED : 0);
      long total = 0;
      int i, slots, extras = 0;
      size_t k;
      char* seen = calloc((size_t)kThreads * 1000, 1);
      CHECK(l != NULL && items != NULL && seen != NULL);
      if (l == NULL || items == NULL || seen == NULL) continue;
      for (i = 0; i < kThreads; ++i) {
        args[i].l = l;
        args[i].items = items + (size_t)i * 1000;
      }
      run_threads(list_worker, args, sizeof(args[0]));
      if (checked) {
        /* A stored node pushed again is refused, and the list keeps one copy of it. */
        struct item extra;
        memset(&extra, 0, sizeof(extra));
        CHECK(percpu_freelist_push(l, &extra.node) == 0);
        CHECK(percpu_freelist_push(l, &extra.node) == -EEXIST);
        CHECK(percpu_freelist_push(l, &extra.node) == -EEXIST);
        for (i = 0; i < slots_of(l); ++i) {
          struct percpu_freelist_node* n = percpu_freelist_drain(l, i);
          for (; n != NULL; n = n->next) {
            if (n == &extra.node) {
              ++extras;
              continue;
            }
            k = (size_t)((struct item*)n - items);
            CHECK(k < (size_t)kThreads * 1000 && !seen[k]);
            seen[k] = 1;
            ++total;
          }
        }
        CHECK(extras == 1);
      }
      CHECK(percpu_freelist_push(l, NULL) == -EINVAL);
      slots = percpu_freelist_slots(l);
      CHECK(slots >= 1);
      errno = 0;
      CHECK(percpu_freelist_drain(l, slots) == NULL && errno == ERANGE);
      CHECK(percpu_freelist_drain(l, -1) == NULL && errno == ERANGE);
      /* Every node comes back exactly once from the drains. */
      for (i = 0; i < slots; ++i) {
        struct percpu_freelist_node* n = percpu_freelist_drain(l, i);
        for (; n != NULL; n = n->next) {
          k = (size_t)((struct item*)n - items);
          CHECK(k < (size_t)kThreads * 1000 && !seen[k]);
          seen[k] = 1;
          ++total;
        }
      }
      CHECK(total == (long)kThreads * 1000);
      CHECK(percpu_freelist_pop_all(l) == NULL);
      percpu_freelist_destroy(l);
      free(seen);
      free(items);
    }
  }
}

/* ---- pool ---- */

static void test_pool(void) {
  int m;
  CHECK(percpu_pool_create(PERCPU_CPU_ID, 1000, 0) == NULL && errno == EINVAL);
  CHECK(percpu_pool_alloc(NULL, 8) == NULL && errno == EINVAL);
  for (m = 0; m < 2; ++m) {
    percpu_pool* p = percpu_pool_create(kModes[m], 0, 0);
    size_t stride;
    int slots, i;
    int64_t* obj;
    CHECK(p != NULL);
    if (p == NULL) continue;
    stride = percpu_pool_stride(p);
    slots = percpu_pool_slots(p);
    CHECK(stride >= 4096 && stride % 4096 == 0 && slots >= 1);
    obj = percpu_pool_alloc(p, sizeof(int64_t));
    CHECK(obj != NULL);
    if (obj != NULL) {
      for (i = 0; i < slots; ++i) {
        int64_t* s = percpu_pool_slot(obj, stride, i);
        CHECK(*s == 0);
        *s = i + 1;
      }
      for (i = 0; i < slots; ++i) CHECK(*(int64_t*)percpu_pool_slot(obj, stride, i) == i + 1);
      CHECK(percpu_pool_free(p, obj, sizeof(int64_t)) == 0);
      CHECK(percpu_pool_free(p, obj, sizeof(int64_t)) == -EINVAL); /* double free */
    }
    CHECK(percpu_pool_alloc(p, 0) == NULL && errno == EINVAL);
    CHECK(percpu_pool_alloc(p, stride + 1) == NULL && errno == EINVAL);
    CHECK(percpu_pool_free(p, &m, 8) == -EINVAL); /* not the pool's */
    CHECK(percpu_pool_free(p, NULL, 8) == 0);
    percpu_pool_destroy(p);
  }
}

/* ---- rwsem ---- */

struct rwsem_arg {
  percpu_rwsem* s;
  long* a;
  long* b;
  int index;
};

static void* rwsem_worker(void* p) {
  struct rwsem_arg* r = p;
  int i;
  for (i = 0; i < 20000; ++i) {
    if (r->index == 0 && i % 16 == 0) {
      if (percpu_rwsem_down_write(r->s) != 0) {
        __atomic_add_fetch(&failures, 1, __ATOMIC_RELAXED);
        continue;
      }
      ++*r->a; /* a and b always match outside a writer */
      ++*r->b;
      percpu_rwsem_up_write(r->s);
    } else {
      if (percpu_rwsem_down_read(r->s) != 0) {
        __atomic_add_fetch(&failures, 1, __ATOMIC_RELAXED);
        continue;
      }
      if (__atomic_load_n(r->a, __ATOMIC_RELAXED) != __atomic_load_n(r->b, __ATOMIC_RELAXED))
        __atomic_add_fetch(&failures, 1, __ATOMIC_RELAXED);
      percpu_rwsem_up_read(r->s);
    }
  }
  return NULL;
}

static void test_rwsem(void) {
  int m;
  CHECK(percpu_rwsem_down_read(NULL) == -EINVAL);
  for (m = 0; m < 2; ++m) {
    struct rwsem_arg args[kThreads];
    long a = 0, b = 0;
    int i;
    percpu_rwsem* s = percpu_rwsem_create(kModes[m]);
    CHECK(s != NULL);
    if (s == NULL) continue;
    for (i = 0; i < kThreads; ++i) {
      args[i].s = s;
      args[i].a = &a;
      args[i].b = &b;
      args[i].index = i;
    }
    run_threads(rwsem_worker, args, sizeof(args[0]));
    CHECK(a == 20000 / 16 && b == a);
    CHECK(percpu_rwsem_down_read_trylock(s) == 1);
    CHECK(percpu_rwsem_down_write_trylock(s) == 0); /* a reader holds it */
    CHECK(percpu_rwsem_up_read(s) == 0);
    CHECK(percpu_rwsem_down_write_trylock(s) == 1);
    CHECK(percpu_rwsem_down_read_trylock(s) == 0); /* a writer holds it */
    CHECK(percpu_rwsem_up_write(s) == 0);
    percpu_rwsem_destroy(s);
  }
}

/* ---- ref ---- */

static int released;

static void on_release(percpu_ref* r, void* arg) {
  CHECK(arg == &released);
  ++*(int*)arg;
  percpu_ref_destroy(r); /* the callback may destroy the ref */
}

struct ref_arg {
  percpu_ref* r;
};

static void* ref_worker(void* p) {
  struct ref_arg* a = p;
  int i;
  for (i = 0; i < kIterations; ++i) {
    if (percpu_ref_get(a->r) != 0) __atomic_add_fetch(&failures, 1, __ATOMIC_RELAXED);
    if (percpu_ref_put(a->r) != 0) __atomic_add_fetch(&failures, 1, __ATOMIC_RELAXED);
  }
  if (percpu_ref_get(a->r) != 0)
    __atomic_add_fetch(&failures, 1, __ATOMIC_RELAXED); /* one kept by each thread until the end */
  return NULL;
}

static void test_ref(void) {
  int m, i;
  CHECK(percpu_ref_get(NULL) == -EINVAL);
  for (m = 0; m < 2; ++m) {
    struct ref_arg args[kThreads];
    percpu_ref* r = percpu_ref_create(kModes[m], on_release, &released);
    released = 0;
    CHECK(r != NULL);
    if (r == NULL) continue;
    for (i = 0; i < kThreads; ++i) args[i].r = r;
    run_threads(ref_worker, args, sizeof(args[0]));
    CHECK(percpu_ref_is_dying(r) == 0);
    CHECK(percpu_ref_kill(r) == 0);
    CHECK(percpu_ref_kill(r) == -EINVAL); /* twice */
    CHECK(percpu_ref_resurrect(r) == 0);
    CHECK(percpu_ref_kill(r) == 0);
    CHECK(percpu_ref_is_dying(r) == 1);
    CHECK(percpu_ref_tryget_live(r) == 0);
    CHECK(percpu_ref_tryget(r) == 1);
    CHECK(percpu_ref_put(r) == 0);
    CHECK(percpu_ref_is_zero(r) == 0);
    for (i = 0; i < kThreads - 1; ++i) CHECK(percpu_ref_put(r) == 0);
    CHECK(released == 0);
    CHECK(percpu_ref_put(r) == 0); /* the last reference: release runs (and destroys r) */
    CHECK(released == 1);
  }
}

/* ---- histogram ---- */

static void* histogram_worker(void* p) {
  struct counter_arg* a = p;
  uint64_t v;
  for (v = 1; v <= 1000; ++v)
    if (percpu_histogram_record(a->h, v) != 0) __atomic_add_fetch(&failures, 1, __ATOMIC_RELAXED);
  return NULL;
}

static void test_histogram(void) {
  int m;
  CHECK(percpu_histogram_create(PERCPU_CPU_ID, 0, 15) == NULL && errno == EINVAL);
  CHECK(percpu_histogram_create(PERCPU_CPU_ID, 0, -5) == NULL && errno == EINVAL);
  CHECK(percpu_histogram_record(NULL, 1) == -EINVAL);
  CHECK(percpu_histogram_snapshot_count(NULL) == 0);
  for (m = 0; m < 2; ++m) {
    struct counter_arg args[kThreads];
    percpu_histogram* h = percpu_histogram_create(kModes[m], 1000000, -1);
    percpu_histogram_snapshot* s;
    uint64_t q = 0;
    int i;
    CHECK(h != NULL);
    if (h == NULL) continue;
    for (i = 0; i < kThreads; ++i) args[i].h = h;
    run_threads(histogram_worker, args, sizeof(args[0]));
    CHECK(percpu_histogram_record(h, 2000000) == 0); /* above the range */
    s = percpu_histogram_snapshot_take(h, 1);
    CHECK(s != NULL);
    if (s != NULL) {
      CHECK(percpu_histogram_snapshot_count(s) == (uint64_t)kThreads * 1000 + 1);
      CHECK(percpu_histogram_snapshot_sum(s) == (uint64_t)kThreads * 500500 + 2000000);
      CHECK(percpu_histogram_snapshot_above_range(s) == 1);
      CHECK(percpu_histogram_snapshot_min(s) == 1);
      CHECK(percpu_histogram_snapshot_value_at_quantile(s, 0.5, &q) == 0);
      CHECK(q >= 496 && q <= 504); /* 500 to 2^-7 relative precision */
      CHECK(percpu_histogram_snapshot_count_at_or_below(s, 100) == (uint64_t)kThreads * 100);
      CHECK(percpu_histogram_snapshot_value_at_quantile(s, 1.5, &q) == -EINVAL);
      CHECK(percpu_histogram_snapshot_value_at_quantile(s, 0.5, NULL) == -EINVAL);
      percpu_histogram_snapshot_destroy(s);
    }
    s = percpu_histogram_snapshot_take(h, 0); /* after the reset: empty */
    CHECK(s != NULL && percpu_histogram_snapshot_count(s) == 0);
    percpu_histogram_snapshot_destroy(s);
    percpu_histogram_destroy(h);
  }
}

int main(void) {
  test_info();
  test_getcpu();
  test_counter();
  test_batched_counter();
  test_freelist();
  test_pool();
  test_rwsem();
  test_ref();
  test_histogram();
  if (failures != 0) {
    fprintf(stderr, "%d check(s) failed\n", failures);
    return 1;
  }
  printf("all C API checks passed\n");
  return 0;
}
