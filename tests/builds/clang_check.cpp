// Compiled by clang (when installed) as a check that the headers build with it too: the fast
// paths' asm operands and attributes differ by compiler. Not linked.
#include <percpu/percpu.h>

int read_both() {
  int sum = 0;
  for (int i = 0; i < 100; ++i) sum += percpu::current_cpu() + percpu::current_mm_cid();
  return sum;
}

void use_structures(percpu::counter<long, percpu::index_mode::mm_cid>& c,
                    percpu::spinlock<percpu::index_mode::cpu_id>& lock) {
  for (int i = 0; i < 100; ++i) c.add(1);
  percpu::spinlock<percpu::index_mode::cpu_id>::guard held(lock);
}

void use_read_mostly(percpu::percpu_rwsem<percpu::index_mode::mm_cid>& rwsem,
                     percpu::percpu_ref<percpu::index_mode::cpu_id>& ref) {
  rwsem.lock_shared();
  rwsem.unlock_shared();
  ref.get();
  ref.put();
}
