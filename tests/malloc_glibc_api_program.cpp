// glibc's malloc API beyond malloc and free, as programs use it, for the preload tests
// (malloc_large_test.cpp runs each case with glibc's malloc and with percpu malloc preloaded).
// Linked with nothing of percpu. Each case prints one line of results on standard output.
//
//   deepbind LIB   a block from LIB (loaded with RTLD_DEEPBIND, so its malloc is libc's) is
//                  measured, grown and freed by the program: "deepbind ok"
//   info           with ~110 MB live in 1000-byte objects: mallinfo2's arena and uordblks, then
//                  after freeing them malloc_trim's answer, mallopt's answers, and whether
//                  malloc_info wrote XML: "arena A uordblks U trim T mallopt M info I"
#include <dlfcn.h>
#include <malloc.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
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

}  // namespace

int main(int argc, char** argv) {
  const std::string what = argc > 1 ? argv[1] : "";
  if (what == "deepbind" && argc == 3) return deepbind(argv[2]);
  if (what == "info" && argc == 2) return info();
  std::fprintf(stderr, "usage: %s deepbind LIB | info\n", argv[0]);
  return 2;
}
