// Disarming the threads that still point at the descriptors of an object being unloaded (see
// percpu/internal/unload_teardown.h).
#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <sys/auxv.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>

#include "percpu/abi.h"
#include "percpu/internal/arch.h"
#include "percpu/internal/unload_teardown.h"
#include "percpu/runtime.h"

extern "C" int __cxa_atexit(void (*function)(void*), void* argument, void* dso);

namespace percpu::detail {
namespace {

// Clears *field if it holds a descriptor address in [lo, hi). A compare-and-swap: the owner
// thread may store a new descriptor address meanwhile, the kernel may store 0; either wins.
void disarm_field(std::uint64_t* field, std::uintptr_t lo, std::uintptr_t hi) {
  std::uint64_t seen = __atomic_load_n(field, __ATOMIC_RELAXED);
  while (seen >= lo && seen < hi) {
    if (__atomic_compare_exchange_n(field, &seen, 0, false, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED))
      return;
  }
}

// True when `addr` lies in the main program, or when that cannot be told (dladdr() fails, as
// in a static program): such code is unloaded only at exit, and nothing is done for it.
bool in_main_program(std::uintptr_t addr) {
  const unsigned long phdr = getauxval(AT_PHDR);
  Dl_info object{}, program{};
  if (phdr == 0 || dladdr(reinterpret_cast<void*>(addr), &object) == 0 ||
      dladdr(reinterpret_cast<void*>(phdr), &program) == 0)
    return true;
  return object.dli_fbase == program.dli_fbase;
}

// The robust-list head the kernel holds for thread `tid` (0: the calling thread), or 0.
std::uintptr_t robust_list_head(pid_t tid) {
  void* head = nullptr;
  std::size_t len = 0;
  if (syscall(SYS_get_robust_list, tid, &head, &len) != 0) return 0;
  return reinterpret_cast<std::uintptr_t>(head);
}

// The other thread's area at `area`: read without risk of a fault, and disarmed if it is a
// registered area (kernel-written ids) whose rseq_cs points at a descriptor in [lo, hi).
void disarm_other_thread(std::uintptr_t area, std::uintptr_t lo, std::uintptr_t hi) {
  abi::rseq_area copy;
  iovec local{&copy, sizeof(copy.cpu_id_start) + sizeof(copy.cpu_id) + sizeof(copy.rseq_cs)};
  iovec remote{reinterpret_cast<void*>(area), local.iov_len};
  if (process_vm_readv(getpid(), &local, 1, &remote, 1, 0) != static_cast<ssize_t>(local.iov_len))
    return;
  // Descriptors are 32-byte aligned; ids the kernel wrote are small and non-negative.
  if (copy.rseq_cs < lo || copy.rseq_cs >= hi || copy.rseq_cs % 32 != 0) return;
  if (copy.cpu_id_start > (1u << 20) || copy.cpu_id < 0 || copy.cpu_id > (1 << 20)) return;
  disarm_field(reinterpret_cast<std::uint64_t*>(area + abi::kOffRseqCs), lo, hi);
}

// A directory entry's name as a thread id; 0 for "." and "..".
pid_t parse_tid(const char* name) {
  pid_t tid = 0;
  for (; *name >= '0' && *name <= '9'; ++name) tid = tid * 10 + (*name - '0');
  return *name == '\0' ? tid : 0;
}

// Set by the exit handler below: exit() has run every handler registered after libpercpu
// loaded; what runs the teardowns from here is _dl_fini() (unload_teardown.h).
std::atomic<bool> g_exiting{false};

void mark_exiting(void*) {
  g_exiting.store(true, std::memory_order_release);
}

// Priority 101: registered as early as libpercpu can, so that it runs after every handler
// registered after it (no object handle: dlclose() never runs it).
__attribute__((constructor(101))) void register_exit_marker() {
  __cxa_atexit(mark_exiting, nullptr, nullptr);
}

}  // namespace

void disarm_range(std::uintptr_t lo, std::uintptr_t hi) noexcept {
  if (g_exiting.load(std::memory_order_acquire)) return;  // exit(): see unload_teardown.h
  const std::intptr_t off = __atomic_load_n(&g_hot.rseq_offset, __ATOMIC_ACQUIRE);
  if (off == 0 || lo >= hi || in_main_program(lo)) return;  // nothing ran, or not unloadable
  const std::uintptr_t tp = reinterpret_cast<std::uintptr_t>(arch::thread_pointer());
  disarm_field(reinterpret_cast<std::uint64_t*>(tp + off + abi::kOffRseqCs), lo, hi);

  // glibc registers each thread's robust list at the same place in its thread descriptor, so
  // the calling thread's head and thread pointer give the distance for every thread.
  const std::uintptr_t own_head = robust_list_head(0);
  if (own_head == 0) return;
  const std::uintptr_t head_to_area = tp - own_head + static_cast<std::uintptr_t>(off);
  if (tp - own_head + 65536 > 131072) return;  // not a thread descriptor's own field

  const int dir = open("/proc/self/task", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) return;
  const pid_t self = static_cast<pid_t>(syscall(SYS_gettid));
  alignas(8) char buf[4096];
  for (;;) {
    const long n = syscall(SYS_getdents64, dir, buf, sizeof(buf));
    if (n <= 0) break;
    for (long pos = 0; pos < n;) {
      const auto* entry = reinterpret_cast<const dirent64*>(buf + pos);
      pos += entry->d_reclen;
      const pid_t tid = parse_tid(entry->d_name);
      if (tid <= 0 || tid == self) continue;
      const std::uintptr_t head = robust_list_head(tid);
      if (head != 0) disarm_other_thread(head + head_to_area, lo, hi);
    }
  }
  close(dir);
}

}  // namespace percpu::detail
