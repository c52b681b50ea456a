/* A C program that loads the plugin (tests/plugin.cpp), runs its per-CPU sections on three
 * threads and unloads it with dlclose(), calling nothing of percpu, 20 times over; after each
 * dlclose() the threads that ran the sections wake up and are signalled (a SIGALRM storm),
 * preempted and migrated. The plugin's unload teardown must have disarmed every thread: a
 * thread left pointing at an unmapped descriptor is killed by the kernel (SIGSEGV). Built twice:
 * linked with libpercpu.so, and linked with nothing of percpu (the plugin brings it in).
 * Usage: unload_c_main PLUGIN; exit status 0 when it survives. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

enum { kRounds = 20, kOthers = 2 };

static long (*g_run)(int);
static int g_wake[2];
static atomic_int g_ran;
static atomic_long g_signals;

static void on_alarm(int sig) {
  (void)sig;
  atomic_fetch_add_explicit(&g_signals, 1, memory_order_relaxed);
}

static void spin_us(long us) {
  struct timespec start, now;
  clock_gettime(CLOCK_MONOTONIC, &start);
  do {
    for (int i = 0; i < 1000; ++i) __asm__ volatile("");
    clock_gettime(CLOCK_MONOTONIC, &now);
  } while ((now.tv_sec - start.tv_sec) * 1000000L + (now.tv_nsec - start.tv_nsec) / 1000 < us);
}

/* Sleeps, yields, spins and moves between the allowed CPUs: every way the kernel looks at the
 * thread's rseq_cs. */
static void be_preempted(void) {
  cpu_set_t allowed, one;
  sched_getaffinity(0, sizeof(allowed), &allowed);
  for (int cpu = 0, moves = 0; cpu < CPU_SETSIZE && moves < 4; ++cpu) {
    if (!CPU_ISSET(cpu, &allowed)) continue;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    sched_setaffinity(0, sizeof(one), &one);
    spin_us(300);
    ++moves;
  }
  sched_setaffinity(0, sizeof(allowed), &allowed);
  for (int i = 0; i < 5; ++i) {
    sched_yield();
    usleep(200);
    spin_us(200);
  }
}

static void* other_thread(void* arg) {
  (void)arg;
  /* SIGALRM stays blocked until the plugin is gone: a signal delivered before that would let
   * the kernel clear this thread's rseq_cs itself and hide a missing teardown. */
  sigset_t alarm_set;
  sigemptyset(&alarm_set);
  sigaddset(&alarm_set, SIGALRM);
  pthread_sigmask(SIG_BLOCK, &alarm_set, NULL);
  g_run(50);
  atomic_fetch_add(&g_ran, 1);
  char c;
  while (read(g_wake[0], &c, 1) < 0 && errno == EINTR) {
  }
  pthread_sigmask(SIG_UNBLOCK, &alarm_set, NULL);
  be_preempted();
  return NULL;
}

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = on_alarm;
  sa.sa_flags = SA_RESTART;
  sigaction(SIGALRM, &sa, NULL);
  const struct itimerval every = {{0, 200}, {0, 200}};
  setitimer(ITIMER_REAL, &every, NULL);
  for (int round = 0; round < kRounds; ++round) {
    void* h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) {
      const char* why = dlerror();
      fprintf(stderr, "dlopen: %s\n", why);
      /* libpercpu.so's thread-locals are initial-exec: a process that did not link it gets them
         from glibc's static TLS surplus, which some builds (aarch64 bookworm) have used up. */
      return why != NULL && strstr(why, "static TLS") != NULL ? 77 : 3;
    }
    g_run = (long (*)(int))dlsym(h, "plugin_run");
    if (g_run == NULL || pipe(g_wake) != 0) return 4;
    atomic_store(&g_ran, 0);
    pthread_t others[kOthers];
    for (int i = 0; i < kOthers; ++i) pthread_create(&others[i], NULL, other_thread, NULL);
    g_run(50);
    while (atomic_load(&g_ran) != kOthers) sched_yield();
    if (dlclose(h) != 0) return 5;
    g_run = NULL;
    if (write(g_wake[1], "xx", kOthers) != kOthers) return 6;
    be_preempted();
    for (int i = 0; i < kOthers; ++i) pthread_join(others[i], NULL);
    close(g_wake[0]);
    close(g_wake[1]);
  }
  const struct itimerval off = {{0, 0}, {0, 0}};
  setitimer(ITIMER_REAL, &off, NULL);
  printf("%d rounds, %ld signals\n", kRounds, atomic_load(&g_signals));
  return 0;
}
