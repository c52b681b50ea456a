// Uses a counter in both index modes and exits 0 when every increment is counted.
#include <percpu/percpu.h>

#include <cstdio>

int main() {
  percpu::counter<long, percpu::index_mode::cpu_id> by_cpu;
  percpu::counter<long, percpu::index_mode::mm_cid> by_cid;
  for (int i = 0; i < 1000; ++i) {
    by_cpu.add(1);
    by_cid.add(2);
  }
  std::printf("%ld %ld\n", by_cpu.load(), by_cid.load());
  return by_cpu.load() == 1000 && by_cid.load() == 2000 ? 0 : 1;
}
