// glibc's malloc API beyond malloc and free, as programs use it, for the preload tests
// (malloc_large_test.cpp runs each case with glibc's malloc and with percpu malloc preloaded).
// Linked with nothing of percpu. Each case prints one line of results on standard output.
//
//   deepbind LIB   a block from LIB (loaded with RTLD_DEEPBIND, so its malloc is libc's) is
//                  measured, grown and freed by the program: "deepbind ok"
//   info           with ~110 MB live in 1000-byte objects: mallinfo2's arena and uordblks, then
//                  after freeing them malloc_trim's answer, mallopt's answers, and whether
//                  malloc_info wrote XML: "arena A uordblks U trim T mallopt M info I"
//   fork-introspection N
//                  a thread calls mallinfo2, malloc_info and malloc_stats in a loop (with
//                  allocations between) while the main thread forks N children; each child
//                  calls the three once and exits; a child still running after 10 s is killed:
//                  "children N ok K hung H"
//   fork-first-use N
//                  4 threads allocate and free every small size, the first time as fast as
//                  they can, while the main thread forks N children; each child allocates and frees
//                  a block of every small size and exits; a child still running after 10 s is
//                  killed: "children N ok K hung H"
//   fork-anon      the anonymous memory (/proc/self/smaps_rollup) a fork adds to a process that
//                  used one size: "anon_growth_kib K"
//   cancel-introspection N
//                  N times: a thread looping mallinfo2(), malloc_info(), malloc_stats() and
//                  usleep(50) is cancelled (deferred) and joined: "cancelled N"
//   background     with PERCPU_MALLOC_BACKGROUND=1 in the environment: threads right after
//                  start, then after 64 MB were allocated and freed and 2.5 s of a large
//                  block now and then:
//                  "threads_at_start A threads_later B"
#include <dirent.h>
#include <dlfcn.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

int deepbind(const char* lib) {
  void* h = dlopen(lib, RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
  if (h == nullptr) {
    std::printf("dlopen failed: %s\n", dlerror());
    return 1;
  }
  auto alloc = reinterpret_cast<void* (*)(std::size_t)>(dlsym(h, "deepbind_alloc"));
  if (alloc == nullptr) return 1;
  auto* p = static_cast<char*>(alloc(100));
  if (p == nullptr) return 1;
  std::memset(p, 7, 100);
  if (malloc_usable_size(p) < 100) return 3;
  p = static_cast<char*>(std::realloc(p, 5000));
  if (p == nullptr || p[99] != 7) return 4;
  std::free(p);
  std::free(alloc(300000));  // a large one too
  std::printf("deepbind ok\n");
  return 0;
}

int info() {
  std::vector<void*> live;
  for (int i = 0; i < 110000; ++i) {
    void* p = std::malloc(1000);
    std::memset(p, 1, 1000);
    live.push_back(p);
  }
  const struct mallinfo2 m = mallinfo2();
  for (void* p : live) std::free(p);
  std::vector<void*>().swap(live);
  const int trimmed = malloc_trim(0);
  const int opt = mallopt(M_MMAP_THRESHOLD, 1 << 20) * 10 + mallopt(12345, 1);
  char* xml = nullptr;
  std::size_t len = 0;
  FILE* f = open_memstream(&xml, &len);
  const int rc = malloc_info(0, f);
  std::fclose(f);
  const bool is_xml = rc == 0 && xml != nullptr && std::strstr(xml, "<malloc version=") != nullptr;
  std::free(xml);
  std::printf("arena %zu uordblks %zu trim %d mallopt %d info %d\n", m.arena, m.uordblks, trimmed,
              opt, is_xml ? 1 : 0);
  return 0;
}

// The three introspection calls, their output thrown away.
void introspect(FILE* sink) {
  const struct mallinfo2 m = mallinfo2();
  if (m.arena == static_cast<std::size_t>(-1)) std::abort();  // (keeps the call)
  malloc_info(0, sink);
  malloc_stats();  // to standard error, which the callers send to /dev/null
}

enum class child_outcome { ok, hung, failed };

// Forks a child that runs `work` and exits 0, killed by SIGALRM if it runs past 10 s; waits for
// it.
template <typename Work>
child_outcome run_child(Work work) {
  const pid_t pid = fork();
  if (pid == 0) {
    alarm(10);
    work();
    _exit(0);
  }
  int st = 0;
  waitpid(pid, &st, 0);
  if (WIFEXITED(st) && WEXITSTATUS(st) == 0) return child_outcome::ok;
  return WIFSIGNALED(st) && WTERMSIG(st) == SIGALRM ? child_outcome::hung : child_outcome::failed;
}

int fork_introspection(int children) {
  FILE* sink = std::fopen("/dev/null", "w");
  if (sink == nullptr) return 1;
  std::atomic<bool> stop{false};
  pthread_t looper;
  auto loop = [](void* arg) -> void* {
    auto* s = static_cast<std::pair<std::atomic<bool>*, FILE*>*>(arg);
    while (!s->first->load(std::memory_order_relaxed)) {
      std::free(std::malloc(100));
      introspect(s->second);
    }
    return nullptr;
  };
  std::pair<std::atomic<bool>*, FILE*> arg{&stop, sink};
  if (pthread_create(&looper, nullptr, loop, &arg) != 0) return 1;
  int ok = 0, hung = 0;
  for (int i = 0; i < children; ++i) {
    usleep(static_cast<useconds_t>(i % 7) * 100);  // land at different points of the loop
    const child_outcome c = run_child([sink] {
      introspect(sink);
      std::free(std::malloc(5000));
    });
    ok += c == child_outcome::ok;
    hung += c == child_outcome::hung;
  }
  stop = true;
  pthread_join(looper, nullptr);
  std::printf("children %d ok %d hung %d\n", children, ok, hung);
  return ok == children ? 0 : 1;
}

// Every size percpu malloc serves from its size classes (16 bytes to 256 KiB), a few per class.
std::vector<std::size_t> small_sizes() {
  std::vector<std::size_t> sizes;
  for (std::size_t s = 16; s <= (std::size_t{256} << 10); s += s < 1024 ? 16 : s / 8)
    sizes.push_back(s);
  return sizes;
}

int fork_first_use(int children) {
  const std::vector<std::size_t> sizes = small_sizes();
  std::atomic<bool> stop{false};
  std::vector<std::thread> users;
  for (std::size_t t = 0; t < 4; ++t)
    users.emplace_back([&, t] {
      for (std::size_t i = 0; !stop.load(std::memory_order_relaxed); ++i) {
        const std::size_t size = sizes[(i * 4 + t) % sizes.size()];
        void* p = std::malloc(size);
        if (p == nullptr) std::abort();
        std::memset(p, 1, size < 64 ? size : 64);
        std::free(p);
        if (i >= sizes.size()) usleep(500);  // the first uses as fast as they come
      }
    });
  int ok = 0, hung = 0;
  for (int i = 0; i < children; ++i) {
    const child_outcome c = run_child([&sizes] {
      for (std::size_t size : sizes) std::free(std::malloc(size));
    });
    ok += c == child_outcome::ok;
    hung += c == child_outcome::hung;
  }
  stop = true;
  for (std::thread& t : users) t.join();
  std::printf("children %d ok %d hung %d\n", children, ok, hung);
  return ok == children ? 0 : 1;
}

long anonymous_kib() {
  FILE* f = std::fopen("/proc/self/smaps_rollup", "r");
  if (f == nullptr) return -1;
  char line[256];
  long kib = -1;
  while (std::fgets(line, sizeof line, f) != nullptr)
    if (std::strncmp(line, "Anonymous:", 10) == 0) kib = std::atol(line + 10);
  std::fclose(f);
  return kib;
}

int fork_anon() {
  void* p = std::malloc(100);
  std::memset(p, 1, 100);
  const long before = anonymous_kib();
  const pid_t pid = fork();
  if (pid == 0) _exit(0);
  int st = 0;
  waitpid(pid, &st, 0);
  const long after = anonymous_kib();
  std::free(p);
  if (before < 0 || after < 0) return 1;
  std::printf("anon_growth_kib %ld\n", after - before);
  return 0;
}

int cancel_introspection(int rounds) {
  FILE* sink = std::fopen("/dev/null", "w");
  if (sink == nullptr) return 1;
  for (int i = 0; i < rounds; ++i) {
    pthread_t t;
    auto loop = [](void* arg) -> void* {
      for (;;) {
        introspect(static_cast<FILE*>(arg));
        usleep(50);
      }
      return nullptr;
    };
    if (pthread_create(&t, nullptr, loop, sink) != 0) return 1;
    usleep(static_cast<useconds_t>(200 + (i % 13) * 150));
    pthread_cancel(t);
    void* result = nullptr;
    pthread_join(t, &result);
    if (result != PTHREAD_CANCELED) return 3;
  }
  std::printf("cancelled %d\n", rounds);
  return 0;
}

int count_threads() {
  DIR* d = opendir("/proc/self/task");
  if (d == nullptr) return -1;
  int n = 0;
  while (const dirent* e = readdir(d)) n += e->d_name[0] != '.';
  closedir(d);
  return n;
}

int background() {
  const int at_start = count_threads();
  std::vector<void*> blocks;
  for (int i = 0; i < 64 * 16; ++i) blocks.push_back(std::malloc(64 * 1024));
  for (void* p : blocks) std::free(p);
  std::vector<void*>().swap(blocks);
  // Slow paths (a large block is one) run passes, at most one per interval: keep making some.
  for (int i = 0; i < 25; ++i) {
    auto* volatile block = static_cast<char*>(std::malloc(300000));  // (not elided)
    block[0] = 1;
    std::free(block);
    usleep(100000);
  }
  std::printf("threads_at_start %d threads_later %d\n", at_start, count_threads());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string what = argc > 1 ? argv[1] : "";
  if (what == "deepbind" && argc == 3) return deepbind(argv[2]);
  if (what == "info" && argc == 2) return info();
  if (what == "fork-introspection" && argc == 3) return fork_introspection(std::atoi(argv[2]));
  if (what == "fork-first-use" && argc == 3) return fork_first_use(std::atoi(argv[2]));
  if (what == "fork-anon" && argc == 2) return fork_anon();
  if (what == "cancel-introspection" && argc == 3) return cancel_introspection(std::atoi(argv[2]));
  if (what == "background" && argc == 2) return background();
  std::fprintf(
      stderr,
      "usage: %s deepbind LIB | info | fork-introspection N | fork-first-use N | fork-anon | "
      "cancel-introspection N | background\n",
      argv[0]);
  return 2;
}
