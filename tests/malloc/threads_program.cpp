// A multi-threaded C++ program for the preload test (malloc_preload_check.sh): it allocates before
// main (a static constructor), hands objects between threads so most frees happen on another
// thread than the allocation (every operator new/delete form on the way), frees in thread_local
// destructors during thread exit, forks while other threads are inside the allocator (the child
// allocates and frees), and allocates and frees in a signal handler on a warm cache. It checks
// every object's contents when it is freed and that every object made was freed exactly once.
// Exit status 0 and the line "ok <objects>" mean all of that held.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <vector>

namespace {

// Allocated before main runs.
std::map<int, std::string>* g_before_main = [] {
  auto* m = new std::map<int, std::string>;
  for (int i = 0; i < 1000; ++i) (*m)[i] = std::string(static_cast<std::size_t>(i % 200), 'x');
  return m;
}();

struct message {
  std::uint64_t id;
  std::string text;         // heap-allocated for most lengths
  std::vector<int> data;    // sized by id
  void* aligned = nullptr;  // operator new with alignment
  ~message() { ::operator delete (aligned, std::align_val_t{64}); }
};

std::mutex g_lock;
std::condition_variable g_ready;
std::deque<std::unique_ptr<message>> g_queue;
bool g_done = false;
std::atomic<long> g_consumed{0};
std::atomic<long> g_bad{0};

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "malloc_threads_program: %s\n", what);
  std::_Exit(1);
}

std::unique_ptr<message> make(std::uint64_t id) {
  auto m = std::make_unique<message>();
  m->id = id;
  m->text.assign(static_cast<std::size_t>(id % 300), static_cast<char>('a' + id % 26));
  m->data.assign(static_cast<std::size_t>(id % 64), static_cast<int>(id));
  m->aligned = ::operator new (96, std::align_val_t{64});
  if (reinterpret_cast<std::uintptr_t>(m->aligned) % 64 != 0) fail("aligned new misaligned");
  std::memset(m->aligned, static_cast<int>(id & 0xff), 96);
  return m;
}

bool intact(const message& m) {
  if (m.text.size() != m.id % 300 || m.data.size() != m.id % 64) return false;
  for (char c : m.text)
    if (c != static_cast<char>('a' + m.id % 26)) return false;
  for (int v : m.data)
    if (v != static_cast<int>(m.id)) return false;
  const auto* a = static_cast<const unsigned char*>(m.aligned);
  for (int i = 0; i < 96; ++i)
    if (a[i] != (m.id & 0xff)) return false;
  return true;
}

// Freed at thread exit, after the thread's own code has returned.
struct exit_work {
  std::vector<std::string> strings;
  ~exit_work() {
    strings.clear();
    std::vector<std::unique_ptr<int>> more;
    for (int i = 0; i < 100; ++i) more.push_back(std::make_unique<int>(i));
  }
};
thread_local exit_work t_exit_work;

void producer(int id, long count) {
  for (int i = 0; i < 50; ++i)
    t_exit_work.strings.emplace_back(static_cast<std::size_t>(64 + i), 'p');
  for (long i = 0; i < count; ++i) {
    auto m = make(static_cast<std::uint64_t>(id) * 1000000 + static_cast<std::uint64_t>(i));
    std::lock_guard<std::mutex> l(g_lock);
    g_queue.push_back(std::move(m));
    g_ready.notify_one();
  }
}

void consumer() {
  for (int i = 0; i < 50; ++i)
    t_exit_work.strings.emplace_back(static_cast<std::size_t>(64 + i), 'c');
  for (;;) {
    std::unique_ptr<message> m;
    {
      std::unique_lock<std::mutex> l(g_lock);
      g_ready.wait(l, [] { return !g_queue.empty() || g_done; });
      if (g_queue.empty()) return;
      m = std::move(g_queue.front());
      g_queue.pop_front();
    }
    if (!intact(*m)) g_bad.fetch_add(1);
    g_consumed.fetch_add(1);
  }  // freed here, on another thread than its allocator's
}

// The signal handler allocates and frees one object of a size nothing else uses; the
// interrupted thread warmed that size's cache, so the handler usually stays on the fast path.
// When it interrupts the allocator's own locked code and the cache is empty, percpu malloc
// returns NULL rather than wait for a lock its own thread holds (reentrancy.h): counted apart.
constexpr std::size_t kHandlerSize = 3000;
std::atomic<long> g_handled{0};
std::atomic<long> g_refused{0};
void on_signal(int) {
  void* p = std::malloc(kHandlerSize);
  if (p == nullptr) {
    g_refused.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  std::memset(p, 0x77, kHandlerSize);
  std::free(p);
  g_handled.fetch_add(1, std::memory_order_relaxed);
}

void signalled_worker(std::atomic<bool>& stop) {
  std::vector<void*> warm;
  for (int i = 0; i < 8; ++i) warm.push_back(std::malloc(kHandlerSize));
  for (void* p : warm) std::free(p);
  while (!stop.load()) {
    void* p = std::malloc(48);
    std::memset(p, 1, 48);
    std::free(p);
  }
}

// Forks while the producers and consumers are inside the allocator: the child must be able to
// allocate and free.
void fork_children(int n) {
  for (int i = 0; i < n; ++i) {
    const pid_t pid = fork();
    if (pid < 0) fail("fork");
    if (pid == 0) {
      std::vector<std::string> v;
      for (int k = 0; k < 10000; ++k) v.emplace_back(static_cast<std::size_t>(k % 500), 'f');
      void* big = std::malloc(1 << 20);
      std::memset(big, 1, 1 << 20);
      std::free(big);
      std::_Exit(v.size() == 10000 ? 0 : 1);
    }
    int status = 0;
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
      fail("a child forked during the run failed");
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

// operator new's ways out when the allocator refuses: bad_alloc without a new-handler, the
// handler called before each retry, null from the nothrow forms; a small new after them works.
int g_handler_calls = 0;
void give_up_handler() {
  ++g_handler_calls;
  std::set_new_handler(nullptr);  // the next retry throws
}

void check_new_refusals() {
  const std::size_t absurd = std::numeric_limits<std::size_t>::max() / 2;
  bool threw = false;
  try {
    void* volatile p = ::operator new(absurd);
    static_cast<void>(p);
  } catch (const std::bad_alloc&) {
    threw = true;
  }
  if (!threw) fail("operator new of an absurd size did not throw bad_alloc");
  std::set_new_handler(give_up_handler);
  threw = false;
  try {
    void* volatile p = ::operator new[](absurd);
    static_cast<void>(p);
  } catch (const std::bad_alloc&) {
    threw = true;
  }
  if (!threw || g_handler_calls != 1) fail("operator new[] did not call the new-handler once");
  if (::operator new(absurd, std::nothrow) != nullptr) fail("nothrow new returned memory");
  if (::operator new[](absurd, std::align_val_t{64}, std::nothrow) != nullptr)
    fail("aligned nothrow new[] returned memory");
  char* small = new char[24];
  std::memset(small, 7, 24);
  delete[] small;
}

}  // namespace

int main(int argc, char** argv) {
  const long per_producer = argc > 1 ? std::atol(argv[1]) : 20000;
  constexpr int kProducers = 4, kConsumers = 4;
  if (g_before_main->size() != 1000 || (*g_before_main)[199].size() != 199)
    fail("the map made before main is wrong");

  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGUSR1, &sa, nullptr);
  std::atomic<bool> stop_signalled{false};
  std::thread signalled(signalled_worker, std::ref(stop_signalled));

  std::vector<std::thread> threads;
  for (int i = 0; i < kConsumers; ++i) threads.emplace_back(consumer);
  for (int i = 0; i < kProducers; ++i) threads.emplace_back(producer, i, per_producer);
  std::thread forker(fork_children, 10);
  for (int i = 0; i < 2000; ++i) {
    pthread_kill(signalled.native_handle(), SIGUSR1);
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  forker.join();
  for (int i = kConsumers; i < kConsumers + kProducers; ++i)
    threads[static_cast<std::size_t>(i)].join();
  {
    std::lock_guard<std::mutex> l(g_lock);
    g_done = true;
  }
  g_ready.notify_all();
  for (int i = 0; i < kConsumers; ++i) threads[static_cast<std::size_t>(i)].join();
  stop_signalled = true;
  signalled.join();

  check_new_refusals();
  const long expected = per_producer * kProducers;
  if (g_bad.load() != 0) fail("an object changed between its allocation and its free");
  if (g_consumed.load() != expected) fail("objects were lost");
  if (g_handled.load() == 0) fail("no signal was handled");
  delete g_before_main;
  std::printf("ok %ld objects, %ld handler allocations (%ld refused)\n", g_consumed.load(),
              g_handled.load(), g_refused.load());
  return 0;
}
