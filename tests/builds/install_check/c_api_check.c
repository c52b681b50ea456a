/* A C program against an installed percpu: <percpu.h> as C11 with -pedantic, linked through
 * CMake's percpu::percpu and through pkg-config (install_check.sh). Prints the mode and checks
 * that a counter counts. */
#include <percpu.h>

#include <stdio.h>

int main(void) {
  struct percpu_info info;
  percpu_counter* c;
  int64_t total = 0;
  int i;
  if (percpu_info(&info) != 0) return 1;
  c = percpu_counter_create(PERCPU_MM_CID);
  if (c == NULL) return 1;
  for (i = 0; i < 1000; ++i) percpu_counter_add(c, 2);
  if (percpu_counter_load(c, &total) != 0 || total != 2000) return 1;
  percpu_counter_destroy(c);
  if (percpu_current_cpu() < 0 || percpu_current_cpu() >= info.cpu_id_bound) return 1;
  printf("C API from an installed percpu: %s, cpu %d, total %lld\n",
         info.rseq_active ? "rseq" : "fallback", percpu_current_cpu(), (long long)total);
  return 0;
}
