// A library that allocates with the malloc of its own lookup scope: loaded with RTLD_DEEPBIND,
// that is libc's, even where percpu malloc is preloaded (malloc_glibc_api_program's case).
#include <cstdlib>

extern "C" __attribute__((visibility("default"))) void* deepbind_alloc(std::size_t n) {
  return std::malloc(n);
}
