/* <percpu.h> for its types alone, the functions found with dlsym(): a program that includes the
 * header but calls nothing of it directly must link without libpercpu (the header's inline code
 * and its unload teardown reference libpercpu only weakly or where called). Built with the
 * strictest declaration warnings, which the header's own definitions must pass. Exit 0. */
#include <percpu.h>

#include <dlfcn.h>
#include <stdio.h>

int main(int argc, char** argv) {
  percpu_counter* (*create)(percpu_index_mode);
  void* lib;
  if (argc < 2) return 0; /* built and linked: the check that matters */
  lib = dlopen(argv[1], RTLD_NOW);
  if (lib == NULL) return 1;
  *(void**)&create = dlsym(lib, "percpu_counter_create");
  if (create == NULL || create(PERCPU_CPU_ID) == NULL) return 1;
  printf("percpu_counter_create found with dlsym\n");
  return 0;
}
