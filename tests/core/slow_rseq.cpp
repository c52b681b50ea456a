// LD_PRELOAD helper for registration_race_check: makes every rseq(2) registration (flags 0) take
// 20 ms and says when one is in progress, so a test can land a signal inside that window.
#include <dlfcn.h>
#include <sys/syscall.h>
#include <time.h>

#include <atomic>
#include <cstdarg>

extern "C" {

/// Nonzero while a thread is inside a delayed rseq(2) registration (read through dlsym).
__attribute__((visibility("default"))) std::atomic<int> percpu_test_rseq_registering{0};

__attribute__((visibility("default"))) long syscall(long number, ...) {
  va_list ap;
  va_start(ap, number);
  long a[6];
  for (long& x : a) x = va_arg(ap, long);
  va_end(ap);
  using fn = long (*)(long, ...);
  static fn real = reinterpret_cast<fn>(dlsym(RTLD_NEXT, "syscall"));
  const bool registering = number == SYS_rseq && a[2] == 0;
  if (registering) {
    percpu_test_rseq_registering.fetch_add(1);
    timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    do {
      clock_gettime(CLOCK_MONOTONIC, &now);
    } while ((now.tv_sec - start.tv_sec) * 1000000000L + (now.tv_nsec - start.tv_nsec) < 20000000L);
  }
  const long r = real(number, a[0], a[1], a[2], a[3], a[4], a[5]);
  if (registering) percpu_test_rseq_registering.fetch_sub(1);
  return r;
}
}
