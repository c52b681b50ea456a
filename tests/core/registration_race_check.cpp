// Regression check (run by ctest with GLIBC_TUNABLES=glibc.pthread.rseq=0 and LD_PRELOAD of
// slow_rseq): a signal whose handler uses percpu arrives while a thread is registering its own
// rseq area. The handler must not register the area first (which made the interrupted
// registration fail with EBUSY and moved the whole process to fallback mode).
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>

#include <percpu/percpu.h>
#include <atomic>
#include <cstdio>
#include <thread>

#include "expect.h"

namespace {

std::atomic<long> g_sink{0};

void on_signal(int) {
  g_sink.fetch_add(percpu::current_cpu());
}

}  // namespace

int main() {
  if (percpu::test::expected_mode() == "fallback") {
    std::puts("skipped: rseq(2) is denied in this pass");
    return 77;
  }
  auto* registering =
      static_cast<std::atomic<int>*>(dlsym(RTLD_DEFAULT, "percpu_test_rseq_registering"));
  if (registering == nullptr) {
    std::puts("FAIL: the slow_rseq preload is not loaded");
    return 1;
  }
  if (percpu::registration().owner != percpu::area_owner::percpu) {
    std::printf("FAIL: expected percpu to own the area (GLIBC_TUNABLES), owner is %s\n",
                percpu::to_string(percpu::registration().owner));
    return 1;
  }
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sa.sa_flags = SA_RESTART;
  sigaction(SIGUSR1, &sa, nullptr);
  // Five signals inside a registration. On a loaded machine this thread may not run during a
  // thread's 20 ms window at all: that round is tried again (up to 100 rounds).
  int landed = 0;
  for (int round = 0; round < 100 && landed < 5; ++round) {
    std::atomic<bool> done{false};
    std::thread t([&done] {
      g_sink.fetch_add(percpu::current_cpu());  // first use: registers
      done.store(true);
    });
    while (registering->load() == 0 && !done.load()) {
    }
    if (!done.load()) {
      pthread_kill(t.native_handle(), SIGUSR1);  // lands inside the 20 ms registration
      ++landed;
    }
    t.join();
  }
  if (landed == 0) {
    std::puts("skipped: no registration window was caught in 100 rounds (a loaded machine)");
    return 77;
  }
  const bool ok = percpu::fallback_switches() == 0 && percpu::rseq_active();
  std::printf("%s: %u switches to fallback mode, rseq %s%s%s\n", ok ? "ok" : "FAIL",
              percpu::fallback_switches(), percpu::rseq_active() ? "active" : "inactive",
              ok ? "" : ": ", ok ? "" : percpu::registration().fallback_reason.c_str());
  return ok ? 0 : 1;
}
