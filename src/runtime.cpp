// Registration of the rseq area, the process's mode (rseq or fallback), and the slow paths of the
// getcpu cache. See include/percpu/runtime.h for the rules.
#include "percpu/runtime.h"

#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/auxv.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <vector>

#include "cancel_disabled.h"
#include "fallback_mode.h"
#include "fence.h"
#include "fork_order.h"
#include "glibc_tunables.h"
#include "never_destroyed.h"
#include "percpu/internal/arch.h"
#include "percpu/internal/fallback.h"
#include "percpu/topology.h"
#include "signals_blocked.h"

// glibc 2.35+ exports these (sysdeps/unix/sysv/linux/rseq-internal.h). Weak, so that percpu
// loads with older or other C libraries; tests check that they resolve with glibc.
extern "C" {
extern const std::ptrdiff_t __rseq_offset __attribute__((weak));
extern const unsigned int __rseq_size __attribute__((weak));
}

#ifndef AT_RSEQ_FEATURE_SIZE
#define AT_RSEQ_FEATURE_SIZE 27
#endif
#ifndef AT_RSEQ_ALIGN
#define AT_RSEQ_ALIGN 28
#endif

namespace percpu {
namespace detail {
hot_state g_hot = {0, 0, 0, kUninitialized, 0, 0, 0, 0, 0, 0, 0};
}  // namespace detail

namespace {

using detail::g_hot;
using detail::signals_blocked;

// percpu's own area, used only when glibc did not register one. 64-byte aligned and 64 bytes
// long: room for the feature sizes and alignments kernels report today. cpu_id starts at -1
// (kCpuIdUninitialized) and mm_cid at kMmCidUnregistered (stored again after each
// unregistration), so the fast paths of both modes send an unregistered thread to the slow path.
struct alignas(64) own_area {
  abi::rseq_area area;
  std::uint8_t extension[32];
};
static_assert(sizeof(own_area) == 64);

__attribute__((tls_model("initial-exec"))) thread_local own_area t_area = {
    {0, abi::kCpuIdUninitialized, 0, 0, 0, abi::kMmCidUnregistered, {}}, {}};
__attribute__((tls_model("initial-exec"))) thread_local bool t_registered = false;
__attribute__((tls_model("initial-exec"))) thread_local int t_dense_id = -1;
// Set when this thread's own registration failed: do not try (and fail) again on every call.
__attribute__((tls_model("initial-exec"))) thread_local bool t_registration_failed = false;
__attribute__((tls_model("initial-exec"))) thread_local op_stats t_stats;

std::atomic<std::uint64_t> g_aborts{0};
std::atomic<std::uint64_t> g_index_changes{0};
std::atomic<unsigned> g_switches{0};

std::mutex g_info_mutex;
// Constructed on first use: initialization may run from constructors of other objects before
// this file's own dynamic initializers.
// Never destroyed: a thread that outlives the static destructors may still switch to fallback
// mode or read the information.
registration_info& info_storage() {  // guarded by g_info_mutex
  static detail::never_destroyed<registration_info> info;
  return info.get();
}
std::uint32_t g_own_length = 0;         // bytes percpu registers for its own area
area_owner g_owner = area_owner::none;  // set once by initialization
pthread_key_t g_exit_key;               // destructor: unregister, release the dense id

std::mutex g_dense_mutex;
// Held for the whole switch to fallback mode, and by fork(), so a child never inherits a switch
// that no thread of its own would finish.
std::mutex g_switch_mutex;
// Dense per-thread ids in use (fallback mm_cid). Never destroyed: threads release their id at
// exit (on_thread_exit), and a thread may exit after the static destructors ran (a pool joined
// from a static destructor, a detached thread still running at exit()).
std::vector<bool>& dense_used() {
  static detail::never_destroyed<std::vector<bool>> used;
  return used.get();
}

long sys_rseq(void* area, std::uint32_t len, int flags) {
  return syscall(abi::kSysRseq, area, len, flags, abi::kSignature);
}

std::string errno_reason(int err) {
  switch (err) {
    case ENOSYS:
      return "rseq(2) is not implemented here (ENOSYS): a kernel before 4.18, valgrind, "
             "qemu-user, or a seccomp filter";
    case EPERM:
      return "rseq(2) was denied (EPERM): a seccomp filter or security policy";
    case EINVAL:
      return "the kernel rejected percpu's rseq area (EINVAL): another owner already registered "
             "an area for this thread";
    case EBUSY:
      return "an rseq area is already registered for this thread (EBUSY)";
    default:
      return std::string("rseq(2) registration failed: ") + std::strerror(err);
  }
}

std::string glibc_reason(bool symbols) {
  if (!symbols)
    return "the C library does not export __rseq_offset/__rseq_size (glibc before 2.35, or "
           "another libc)";
  if (detail::tunables_disable_rseq(std::getenv("GLIBC_TUNABLES")))
    return "glibc's registration is disabled by GLIBC_TUNABLES=glibc.pthread.rseq=0";
  return "glibc did not register an area (its __rseq_size is 0: registration failed at start)";
}

void on_thread_exit(void*) {
  detail::unregister_this_thread();
  if (t_dense_id >= 0) {
    // Signals blocked: a handler that used percpu in fallback mode between the reset and the
    // unlock would find no id and wait for the mutex its own thread holds.
    signals_blocked no_signals;
    std::lock_guard<std::mutex> lock(g_dense_mutex);
    auto& used = dense_used();
    if (static_cast<std::size_t>(t_dense_id) < used.size()) used[t_dense_id] = false;
    t_dense_id = -1;
  }
}

// Arms the exit hook for this thread. If the thread uses percpu again from a later destructor,
// the hook is armed again and glibc runs it again (PTHREAD_DESTRUCTOR_ITERATIONS rounds).
void arm_exit_hook() {
  pthread_setspecific(g_exit_key, reinterpret_cast<void*>(1));
}

// Registers percpu's own area for the calling thread; returns 0 or an errno value. Signals are
// blocked throughout: a handler that used percpu between our check and the system call would
// register the area itself and make ours fail with EBUSY.
int register_this_thread() {
  signals_blocked guard;
  if (t_registered) return 0;
  // Sections arm the area while it is unregistered too (they leave at their bound compare): a
  // descriptor left there may lie in code unloaded since, which the kernel would read once the
  // area is registered.
  __atomic_store_n(&t_area.area.rseq_cs, 0, __ATOMIC_RELAXED);
  if (sys_rseq(&t_area.area, g_own_length, 0) != 0) return errno;
  t_registered = true;
  arm_exit_hook();
  return 0;
}

// fork(): no lock of ours may be held by a thread that will not exist in the child.
void before_fork() {
  g_switch_mutex.lock();
  g_info_mutex.lock();
  g_dense_mutex.lock();
}

void after_fork_in_parent() {
  g_dense_mutex.unlock();
  g_info_mutex.unlock();
  g_switch_mutex.unlock();
}

void after_fork_in_child() {
  // Only the forking thread exists in the child: every other dense id is free again.
  auto& used = dense_used();
  std::fill(used.begin(), used.end(), false);
  if (t_dense_id >= 0 && static_cast<std::size_t>(t_dense_id) < used.size())
    used[t_dense_id] = true;
  g_dense_mutex.unlock();
  g_info_mutex.unlock();
  g_switch_mutex.unlock();
}

void do_initialize() {
  registration_info info;
  info.feature_size = getauxval(AT_RSEQ_FEATURE_SIZE);
  info.alignment = getauxval(AT_RSEQ_ALIGN);
  info.glibc_symbols = &__rseq_offset != nullptr && &__rseq_size != nullptr;
  info.glibc_rseq_size = info.glibc_symbols ? __rseq_size : 0;
  pthread_key_create(&g_exit_key, on_thread_exit);
  detail::set_fork_handlers(detail::fork_stage::runtime, before_fork, after_fork_in_parent,
                            after_fork_in_child);
  (void)machine_topology();  // read sysfs now, not later inside a hot slow path

  const std::intptr_t own_offset = reinterpret_cast<char*>(&t_area.area) - arch::thread_pointer();
  std::uint32_t mode = detail::kRseqMode;

  if (info.glibc_rseq_size > 0) {
    info.owner = area_owner::glibc;
    info.rseq_offset = __rseq_offset;
    info.area_extent = abi::glibc_area_extent(info.glibc_rseq_size);
  } else {
    info.glibc_reason = glibc_reason(info.glibc_symbols);
    // Register max(32, feature size) bytes, which every kernel since 6.3 accepts for an area
    // aligned to AT_RSEQ_ALIGN; if the kernel asks for more than our 64-byte TLS block, register
    // the original 32 bytes, which every kernel accepts.
    std::uint32_t len = std::max<unsigned long>(abi::kOriginalAreaSize, info.feature_size);
    if (len > sizeof(own_area) || info.alignment > alignof(own_area)) len = abi::kOriginalAreaSize;
    g_own_length = len;
    const int err = register_this_thread();
    if (err == 0) {
      info.owner = area_owner::percpu;
      info.area_extent = len;
    } else {
      info.owner = area_owner::none;
      info.registration_errno = err;
      info.fallback = true;
      info.fallback_reason = errno_reason(err);
      mode = detail::kFallbackMode;
    }
    // Even in fallback mode the fast path reads our (never registered) area: cpu_id stays -1
    // there, which sends every call to the slow path.
    info.rseq_offset = own_offset;
  }
  if (info.owner != area_owner::none)
    info.fields = abi::decide_usable_fields(info.area_extent, info.feature_size);
  {
    std::lock_guard<std::mutex> lock(g_info_mutex);
    info_storage() = info;
  }
  g_owner = info.owner;
  g_hot.node_usable = info.fields.node_id;
  g_hot.mm_cid_usable = info.fields.mm_cid;
  // Sections run only in rseq mode: in fallback mode from the start their bounds stay 0. They
  // are stored before the mode, so a switch to fallback mode (which needs kRseqMode) can never
  // be undone by them; before the offsets are set no section starts (current_ops.h).
  if (mode == detail::kRseqMode) {
    __atomic_store_n(&g_hot.cpu_section_bound,
                     static_cast<std::uint32_t>(machine_topology().cpu_id_bound), __ATOMIC_RELEASE);
    __atomic_store_n(&g_hot.mm_section_bound,
                     static_cast<std::uint32_t>(machine_topology().mm_cid_bound), __ATOMIC_RELEASE);
    if (info.fields.mm_cid)
      __atomic_store_n(&g_hot.mm_cid_field_bound,
                       static_cast<std::uint32_t>(machine_topology().mm_cid_bound),
                       __ATOMIC_RELEASE);
  }
  g_hot.mm_cid_index_offset =
      info.rseq_offset + (info.fields.mm_cid ? abi::kOffMmCid : abi::kOffCpuId);
  // glibc's area: its cpu_id, negative for good in a thread whose registration failed; percpu's
  // own area: its cpu_id_start, never negative (its mm_cid marks it unregistered instead).
  g_hot.registration_offset =
      info.rseq_offset + (info.owner == area_owner::glibc ? abi::kOffCpuId : 0);
  __atomic_store_n(&g_hot.rseq_offset, info.rseq_offset, __ATOMIC_RELEASE);
  __atomic_store_n(&g_hot.fallback, mode, __ATOMIC_RELEASE);
  // Last, with release order: a fast path that sees a bound in these words sees everything
  // above. Stored where the offsets fit in their 32 bits (else they stay 0, and the getcpu cache
  // takes its slow path, which reads the full offsets).
  auto fits = [](std::intptr_t v) { return v == static_cast<std::int32_t>(v); };
  if (fits(g_hot.rseq_offset) && fits(g_hot.mm_cid_index_offset)) {
    __atomic_store_n(&g_hot.cpu_word,
                     detail::getcpu_word(g_hot.rseq_offset, static_cast<std::uint32_t>(
                                                                machine_topology().cpu_id_bound)),
                     __ATOMIC_RELEASE);
    __atomic_store_n(
        &g_hot.mm_cid_word,
        detail::getcpu_word(g_hot.mm_cid_index_offset,
                            static_cast<std::uint32_t>(machine_topology().mm_cid_bound)),
        __ATOMIC_RELEASE);
  }
}

std::atomic<int> g_init_state{0};  // 0: not started, 1: running, 2: done

// The thread's area is registered (cpu_id >= 0), registering percpu's own area if percpu owns
// registration. A thread that cannot register moves the process to fallback mode.
bool ensure_registered() {
  const std::intptr_t off = g_hot.rseq_offset;
  if (arch::load_area_i32<abi::kOffCpuId>(off) >= 0) return true;
  const area_owner owner = g_owner;
  if (owner == area_owner::percpu && !t_registration_failed) {
    const int err = register_this_thread();
    if (err == 0) return true;
    t_registration_failed = true;
    detail::enter_fallback(
        ("a thread could not register its rseq area: " + errno_reason(err)).c_str());
  } else if (owner == area_owner::glibc) {
    detail::enter_fallback("glibc's rseq registration failed for a thread (cpu_id < 0)");
  }
  return false;
}

// An id the kernel reported at or beyond the index space `bound` (sysfs showed fewer CPUs than
// the kernel has, a CPU beyond them was hot-added, or an affinity mask grew after startup): the
// slots of such an id do not exist, and no other index may be borrowed while other threads run
// critical sections on it. Fallback mode's operations are atomic on any slot, so the process
// switches to it (once, recording why) and the id is reduced into the index space. The reason
// is formatted without allocating: percpu malloc's own paths come here.
int out_of_range_index(const char* field, int value, int bound) {
  if (__atomic_load_n(&g_hot.fallback, __ATOMIC_ACQUIRE) != detail::kFallbackMode) {
    char reason[200];
    std::snprintf(reason, sizeof(reason),
                  "the kernel reported %s %d, outside the index space [0, %d) sized from the "
                  "possible, online and allowed CPUs",
                  field, value, bound);
    detail::enter_fallback(reason);
  }
  return value < 0 ? 0 : value % bound;
}

// `value` read from the area, checked against `bound`.
int in_index_space(const char* field, int value, int bound) {
  return static_cast<unsigned>(value) < static_cast<unsigned>(bound)
             ? value
             : out_of_range_index(field, value, bound);
}

int dense_thread_id() {
  if (t_dense_id < 0) {
    // Signals blocked, as in on_thread_exit(): a handler calling this before t_dense_id is set
    // would wait for the mutex held below.
    signals_blocked no_signals;
    std::lock_guard<std::mutex> lock(g_dense_mutex);
    if (t_dense_id < 0) {  // a handler may have taken one between the check and the block
      auto& used = dense_used();
      auto it = std::find(used.begin(), used.end(), false);
      t_dense_id = static_cast<int>(it - used.begin());
      if (it == used.end()) {
        // Out of memory, the id goes unrecorded (a later thread may share it): in fallback mode
        // an index is only where an operation starts, and every operation is correct on any
        // slot. An exception here would end the process (the callers are noexcept).
        try {
          used.push_back(true);
        } catch (const std::bad_alloc&) {
        }
      } else {
        *it = true;
      }
      arm_exit_hook();
    }
  }
  return t_dense_id % machine_topology().mm_cid_bound;
}

}  // namespace

const char* to_string(area_owner owner) noexcept {
  switch (owner) {
    case area_owner::glibc:
      return "glibc";
    case area_owner::percpu:
      return "percpu";
    case area_owner::none:
      break;
  }
  return "none";
}

registration_info registration() {
  detail::initialize();
  std::lock_guard<std::mutex> lock(g_info_mutex);
  return info_storage();
}

bool rseq_active() noexcept {
  detail::initialize();
  return __atomic_load_n(&g_hot.fallback, __ATOMIC_ACQUIRE) == detail::kRseqMode;
}

op_stats this_thread_stats() noexcept {
  return t_stats;
}

op_stats process_stats() noexcept {
  op_stats s;
  s.aborts = g_aborts.load(std::memory_order_relaxed);
  s.index_changes = g_index_changes.load(std::memory_order_relaxed);
  return s;
}

unsigned fallback_switches() noexcept {
  return g_switches.load(std::memory_order_relaxed);
}

namespace detail {

void initialize() noexcept {
  if (PERCPU_LIKELY(g_init_state.load(std::memory_order_acquire) == 2)) return;
  int expected = 0;
  if (g_init_state.compare_exchange_strong(expected, 1, std::memory_order_acq_rel)) {
    do_initialize();
    g_init_state.store(2, std::memory_order_release);
    return;
  }
  while (g_init_state.load(std::memory_order_acquire) != 2) sched_yield();
}

bool try_initialize() noexcept {
  const int state = g_init_state.load(std::memory_order_acquire);
  if (state == 2) return true;
  if (state == 1) return false;
  initialize();  // a thread that wins the race with us initializes; we wait for it
  return true;
}

int current_cpu_slow() noexcept {
  initialize();
  const int bound = machine_topology().cpu_id_bound;
  if (ensure_registered()) {
    const int cpu = arch::load_area_i32<abi::kOffCpuId>(g_hot.rseq_offset);
    if (cpu >= 0) return in_index_space("cpu_id", cpu, bound);
  }
  const int cpu = sched_getcpu();
  return cpu < 0 ? 0 : in_index_space("cpu_id", cpu, bound);
}

int current_node_slow() noexcept {
  initialize();
  // Register first, whatever the kernel fills: every getcpu-cache call leaves the thread
  // registered, also where node_id is not usable (kernels before 6.3) and getcpu() answers.
  const bool registered = ensure_registered();
  if (g_hot.node_usable && registered)
    return arch::load_area_i32<abi::kOffNodeId>(g_hot.rseq_offset);
  unsigned cpu = 0, node = 0;
  if (getcpu(&cpu, &node) != 0) return 0;
  return static_cast<int>(node);
}

void current_cpu_node_slow(int& cpu, int& node) noexcept {
  initialize();
  const bool registered = ensure_registered();  // as in current_node_slow()
  if (g_hot.node_usable && registered) {
    std::int32_t c, n;
    if (arch::read_cpu_node_pair(g_hot.rseq_offset, c, n)) {
      cpu = in_index_space("cpu_id", c, machine_topology().cpu_id_bound);
      node = n;
      return;
    }
  }
  unsigned c = 0, n = 0;
  if (getcpu(&c, &n) != 0) c = n = 0;
  cpu = in_index_space("cpu_id", static_cast<int>(c), machine_topology().cpu_id_bound);
  node = static_cast<int>(n);
}

int current_mm_cid_slow() noexcept {
  initialize();
  if (ensure_registered()) {
    const std::intptr_t off = g_hot.rseq_offset;
    const int bound = machine_topology().mm_cid_bound;
    if (g_hot.mm_cid_usable)
      return in_index_space("mm_cid", arch::load_area_i32<abi::kOffMmCid>(off), bound);
    // Kernels before 6.3: cpu_id serves.
    return in_index_space("cpu_id", arch::load_area_i32<abi::kOffCpuId>(off), bound);
  }
  return dense_thread_id();
}

// The switch itself; the caller holds g_switch_mutex with signals blocked.
static void switch_to_fallback(const char* reason) {
  std::uint32_t expected = kRseqMode;
  if (!__atomic_compare_exchange_n(&g_hot.fallback, &expected, kSwitching, false, __ATOMIC_SEQ_CST,
                                   __ATOMIC_SEQ_CST))
    return;  // already in fallback mode
  {
    std::lock_guard<std::mutex> lock(g_info_mutex);
    info_storage().fallback = true;
    info_storage().fallback_reason = reason;
  }
  // From here every critical section that starts fails its bound check. Abort the ones that
  // began earlier and may still commit; only then may fallback operations touch the slots.
  __atomic_store_n(&g_hot.cpu_section_bound, 0, __ATOMIC_SEQ_CST);
  __atomic_store_n(&g_hot.mm_section_bound, 0, __ATOMIC_SEQ_CST);
  __atomic_store_n(&g_hot.mm_cid_field_bound, 0, __ATOMIC_SEQ_CST);
  // A switch cannot fail; if a thread keeps running on a CPU that could not be fenced, say so.
  const std::vector<int> missed = fence_cpus(-1, 1000);
  if (!missed.empty()) {
    std::lock_guard<std::mutex> lock(g_info_mutex);
    info_storage().fallback_reason +=
        " (the switch could not fence CPUs " + format_cpu_list(missed) +
        ": no membarrier, this thread may not run there, and a thread kept running there)";
  }
  g_switches.fetch_add(1, std::memory_order_relaxed);
  __atomic_store_n(&g_hot.fallback, kFallbackMode, __ATOMIC_RELEASE);
}

void enter_fallback(const char* reason) noexcept {
  initialize();
  if (__atomic_load_n(&g_hot.fallback, __ATOMIC_ACQUIRE) == kFallbackMode) return;
  // No signal handler may run on this thread while it holds the switch: a handler doing a
  // per-CPU operation would wait for the switch that it interrupted. No cancellation either:
  // the fence may read /proc (cancellation points), and an unwind out of this noexcept
  // function would end the process with the switch half done.
  signals_blocked no_signals;
  cancel_disabled no_cancel;
  std::lock_guard<std::mutex> lock(g_switch_mutex);
  switch_to_fallback(reason);
}

void wait_for_fallback() noexcept {
  while (__atomic_load_n(&g_hot.fallback, __ATOMIC_ACQUIRE) == kSwitching) sched_yield();
}

int unregister_this_thread() noexcept {
  signals_blocked guard;  // a handler must not register between the system call and the flag
  if (!t_registered) return EINVAL;
  // Same length as registered; afterwards the kernel writes nothing more into this TLS block.
  if (sys_rseq(&t_area.area, g_own_length, abi::kFlagUnregister) != 0) return errno;
  // The kernel has reset mm_cid to 0, a valid-looking id it no longer guards: mm_cid mode's
  // sections must leave at their bound compare (hot_state::registration_offset).
  __atomic_store_n(&t_area.area.mm_cid, abi::kMmCidUnregistered, __ATOMIC_RELAXED);
  t_registered = false;
  return 0;
}

std::uint32_t g_inject_loops[4] = {0, 0, 0, 0};

void note_abort() noexcept {
  ++t_stats.aborts;
  g_aborts.fetch_add(1, std::memory_order_relaxed);
}

void note_index_change() noexcept {
  ++t_stats.index_changes;
  g_index_changes.fetch_add(1, std::memory_order_relaxed);
}

void note_fallback_op() noexcept {
  ++t_stats.fallback_ops;
}

}  // namespace detail

// Initialize before main so that most programs never take the first-use path.
__attribute__((constructor(101))) static void initialize_at_load() {
  detail::initialize();
}

}  // namespace percpu
