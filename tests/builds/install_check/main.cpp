// Built against an installed percpu with every installed header included first (install_check.sh
// passes them with -include): each public header's inline code used once, so a header that
// needed a symbol the libraries do not export would fail to link here. Exits 0 when every use
// gave the expected result.
#include <percpu/malloc.h>
#include <percpu/percpu.h>

#include <cstdio>
#include <cstdlib>

namespace {
int failures = 0;
void expect(bool ok, const char* what) {
  if (!ok) {
    std::printf("FAIL: %s\n", what);
    ++failures;
  }
}
struct node {
  node* next = nullptr;
};
}  // namespace

int main() {
  constexpr auto kCpu = percpu::index_mode::cpu_id;
  constexpr auto kCid = percpu::index_mode::mm_cid;
  expect(percpu::current_cpu() >= 0, "current_cpu()");
  expect(percpu::current_node() >= 0, "current_node()");

  percpu::counter<long, kCpu> by_cpu;
  percpu::counter<long, kCid> by_cid;
  for (int i = 0; i < 1000; ++i) {
    by_cpu.add(1);
    by_cid.add(2);
  }
  expect(by_cpu.load() == 1000 && by_cid.load() == 2000, "counter");

  percpu::freelist<node, &node::next, kCpu, false> list;
  node a, b;
  list.push(&a);
  list.push(&b);
  int popped = 0;
  while (list.pop() != nullptr) ++popped;
  expect(popped == 2, "freelist");

  percpu::buffer<int*, kCpu, false> buf(8);
  int x = 7;
  expect(buf.push(&x), "buffer push");
  expect(buf.pop() == &x, "buffer pop");

  percpu::spinlock<kCpu> lock;
  const int held = lock.lock();
  expect(lock.is_locked(held), "spinlock");
  lock.unlock(held);

  percpu::percpu_rwsem<kCid> rwsem;
  rwsem.lock_shared();
  expect(!rwsem.try_lock() && rwsem.readers() == 1, "percpu_rwsem read lock");
  rwsem.unlock_shared();
  rwsem.lock();
  expect(!rwsem.try_lock_shared(), "percpu_rwsem write lock");
  rwsem.unlock();

  int released = 0;
  percpu::percpu_ref<kCpu> ref([&] { ++released; });
  ref.get();
  ref.kill();
  ref.put();
  expect(released == 1 && ref.is_zero(), "percpu_ref");

  percpu::pool<kCpu> pool;
  auto hits = pool.allocate<std::intptr_t>();
  percpu::retry<kCpu>([&](int cpu) { return percpu::add<kCpu>(&hits[cpu], 1, cpu); });
  std::intptr_t sum = 0;
  for (int i = 0; i < percpu::index_space<kCpu>(); ++i) sum += hits[i];
  expect(sum == 1, "pool and add");
  pool.free(hits);

  expect(
      !percpu::try_fence_index(kCpu, percpu::current_cpu()) || !percpu::membarrier_rseq_available(),
      "try_fence_index");
  expect(!percpu::machine_topology().possible_cpus.empty(), "machine_topology");

  void* m = std::malloc(100);
  expect(m != nullptr, "malloc");
  std::free(m);
  percpu_malloc_stats_print(-1);  // an invalid descriptor: writes nothing, returns

  std::printf("mode=%s %d failed\n", percpu::rseq_active() ? "rseq" : "fallback", failures);
  return failures == 0 ? 0 : 1;
}
