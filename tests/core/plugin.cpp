// A loadable module that runs per-CPU operations, for the dlclose() test.
#include <percpu/percpu.h>

namespace {
std::intptr_t g_word = 0;
}

extern "C" __attribute__((visibility("default"))) long plugin_run(int n) {
  using percpu::index_mode;
  for (int i = 0; i < n; ++i) {
    percpu::retry<index_mode::cpu_id>(
        [&](int cpu) { return percpu::add<index_mode::cpu_id>(&g_word, 1, cpu); });
    percpu::retry<index_mode::mm_cid>([&](int cid) {
      return percpu::compare_store<index_mode::mm_cid>(&g_word, -1, 0, cid);  // compare fails
    });
  }
  (void)percpu::current_cpu_node();
  return g_word;
}
