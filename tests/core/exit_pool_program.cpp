// A worker pool built before main() and joined by its destructor, as a program's global thread
// pool often is: started by main(), the workers run per-CPU operations (counters in both index
// modes, a free list, a pool's objects) until the static destructors run, so they exit after exit()
// began. Every piece of percpu state a thread touches on its way out must still be there then. Run
// directly (in each test pass's mode) and under valgrind (fallback mode: valgrind has no rseq),
// which reports a read of destroyed state as an error. Prints "conserved N" when the counters add
// up.
#include <percpu/percpu.h>

#include <atomic>
#include <cstdio>
#include <thread>
#include <vector>

namespace {

struct item {
  item* next = nullptr;
};
item g_items[4][16];  // trivially destructible: in the lists until the end

class worker_pool {
 public:
  worker_pool() {
    for (int i = 0; i < 4; ++i)
      workers_.emplace_back([this, i] {
        while (!started_.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        percpu::pool<percpu::index_mode::mm_cid> objects;
        for (item& it : g_items[i]) list_.push(&it);
        while (!stop_.load(std::memory_order_relaxed)) {
          by_cpu_.add(1);
          by_cid_.add(1);
          if (item* it = list_.pop()) list_.push(it);  // whoever's it was
          auto p = objects.allocate<long>();
          p.at(0) += 1;  // this thread's object alone
          objects.free(p);
          done_.fetch_add(1, std::memory_order_relaxed);
          if (i == 0) std::this_thread::yield();
        }
      });
  }
  void start() { started_ = true; }
  ~worker_pool() {
    stop_ = true;
    for (std::thread& t : workers_) t.join();
    const long rounds = done_.load();
    const bool ok = by_cpu_.load() == rounds && by_cid_.load() == rounds && rounds > 0;
    std::printf(ok ? "conserved %ld\n" : "LOST: rounds %ld\n", rounds);
    std::fflush(stdout);
    if (!ok) std::_Exit(1);
  }

 private:
  std::atomic<bool> started_{false}, stop_{false};
  std::atomic<long> done_{0};
  percpu::counter<long, percpu::index_mode::cpu_id> by_cpu_;
  percpu::counter<long, percpu::index_mode::mm_cid> by_cid_;
  percpu::freelist<item, &item::next, percpu::index_mode::mm_cid> list_;
  std::vector<std::thread> workers_;
};

worker_pool g_workers;

}  // namespace

int main() {
  g_workers.start();  // percpu's first use: its state is made after the pool
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  return 0;  // the workers are still running: exit() stops them, from g_workers' destructor
}
