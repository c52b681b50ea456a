// libpercpu_register.so: registers percpu's own rseq area in every thread of a program that
// does not use percpu itself, for the context-switch check of `percpu bench context-switch`.
//
// Preloaded with GLIBC_TUNABLES=glibc.pthread.rseq=0 (glibc then registers nothing), it makes
// percpu register its area (percpu::current_cpu()'s slow path) in the main thread from a
// constructor and in every new thread before its start routine runs (pthread_create is
// interposed). Children of fork() keep their parent's registration (the kernel copies it), so
// process-mode benchmarks are covered too. Without the tunable glibc owns the area and this
// library only reads it.
//
// With PERCPU_REGISTER_REPORT set, each process prints at exit how many threads it saw and
// which owner served them, so the suite can check that the library did its job.
//
// Threads that glibc starts itself (timer_create's SIGEV_THREAD, POSIX AIO notification) do not
// pass through the interposed pthread_create and stay without percpu's area; the scheduler
// benchmarks start none.
#include <dlfcn.h>
#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <new>

#include "percpu/cpu.h"
#include "percpu/runtime.h"

namespace {

std::atomic<long> g_threads{0};  // threads that asked for their CPU through percpu
std::atomic<long> g_failed{0};   // of those, threads left without an rseq area

// Registers the calling thread's area (when percpu owns registration) and counts the result.
void register_this_thread() {
  const int cpu = percpu::current_cpu();
  g_threads.fetch_add(1, std::memory_order_relaxed);
  if (cpu < 0 || percpu::registration().owner == percpu::area_owner::none)
    g_failed.fetch_add(1, std::memory_order_relaxed);
}

struct start_request {
  void* (*routine)(void*);
  void* arg;
};

void* registered_start(void* p) {
  const start_request request = *static_cast<start_request*>(p);
  delete static_cast<start_request*>(p);
  register_this_thread();
  return request.routine(request.arg);
}

using create_fn = int (*)(pthread_t*, const pthread_attr_t*, void* (*)(void*), void*);

create_fn real_pthread_create() {
  static create_fn real = reinterpret_cast<create_fn>(dlsym(RTLD_NEXT, "pthread_create"));
  return real;
}

// A forked child is one thread, registered as its parent's forking thread was: it counts
// itself alone (the counters it inherited are its parent's).
void count_child_alone() {
  g_threads.store(1, std::memory_order_relaxed);
  g_failed.store(percpu::current_cpu() < 0 ? 1 : 0, std::memory_order_relaxed);
}

__attribute__((constructor)) void register_main_thread() {
  register_this_thread();
  pthread_atfork(nullptr, nullptr, count_child_alone);
}

__attribute__((destructor)) void report() {
  if (std::getenv("PERCPU_REGISTER_REPORT") == nullptr) return;
  std::fprintf(stderr, "percpu-register: pid %d: %ld threads, %ld without an rseq area, owner %s\n",
               static_cast<int>(getpid()), g_threads.load(), g_failed.load(),
               percpu::to_string(percpu::registration().owner));
}

}  // namespace

/// Interposes pthread_create(3): the new thread registers its rseq area (see above) before it
/// runs `routine`. Errors are pthread_create's own; EAGAIN when the request cannot be allocated.
extern "C" __attribute__((visibility("default"))) int pthread_create(pthread_t* thread,
                                                                     const pthread_attr_t* attr,
                                                                     void* (*routine)(void*),
                                                                     void* arg) {
  create_fn real = real_pthread_create();
  if (real == nullptr) return EAGAIN;
  auto* request = new (std::nothrow) start_request{routine, arg};
  if (request == nullptr) return EAGAIN;
  const int err = real(thread, attr, registered_start, request);
  if (err != 0) delete request;
  return err;
}
