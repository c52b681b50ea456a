/* A loadable module in C whose inline counter adds (<percpu.h>, x86-64) run critical sections
 * from its own code, for the dlclose() test (core/unload_c_main.c): its unload teardown
 * (internal/c_counter.h) must disarm every thread that ran them before the code is unmapped. */
#include <percpu.h>

static percpu_counter* g_counters[2];

__attribute__((constructor)) static void plugin_load(void) {
  g_counters[0] = percpu_counter_create(PERCPU_CPU_ID);
  g_counters[1] = percpu_counter_create(PERCPU_MM_CID);
}

__attribute__((destructor)) static void plugin_unload(void) {
  percpu_counter_destroy(g_counters[0]);
  percpu_counter_destroy(g_counters[1]);
}

/* Adds n times to each counter; returns the cpu_id counter's total (negative on an error). */
__attribute__((visibility("default"))) long plugin_run(int n) {
  int64_t total = 0;
  int i;
  for (i = 0; i < n; ++i)
    if (percpu_counter_add(g_counters[0], 1) != 0 || percpu_counter_add(g_counters[1], 1) != 0)
      return -1;
  return percpu_counter_load(g_counters[0], &total) == 0 ? (long)total : -1;
}
