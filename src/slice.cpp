// Time-slice extension (slice.h): enabling it per thread with prctl(2), and the yield after a
// grant. Constants from include/uapi/linux/prctl.h and the syscall tables of Linux 7.0+.
#include "percpu/slice.h"

#include <errno.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "percpu/cpu.h"

#ifndef PR_RSEQ_SLICE_EXTENSION
#define PR_RSEQ_SLICE_EXTENSION 79
#define PR_RSEQ_SLICE_EXTENSION_GET 1
#define PR_RSEQ_SLICE_EXTENSION_SET 2
#define PR_RSEQ_SLICE_EXT_ENABLE 0x01
#endif

namespace percpu {
namespace detail {

__thread std::uint8_t t_slice_state = 0;
__thread std::uint32_t t_slice_depth = 0;
__thread slice_stats t_slice_stats = {};

}  // namespace detail

namespace {

// The kernel's ENOTSUPP (include/linux/errno.h): not in user space's errno.h.
constexpr int kEnotsupp = 524;

#if defined(__x86_64__) || defined(__aarch64__)
// rseq_slice_yield(2): 471 in x86-64's table and in the generic one arm64 uses.
constexpr long kSysRseqSliceYield = 471;
#endif

// Whether the kernel command line turns the feature off (rseq_slice_ext=0).
bool disabled_at_boot() {
  char line[4096] = {};
  if (FILE* f = std::fopen("/proc/cmdline", "r")) {
    if (std::fgets(line, sizeof line, f) == nullptr) line[0] = '\0';
    std::fclose(f);
  }
  return std::strstr(line, "rseq_slice_ext=0") != nullptr ||
         std::strstr(line, "rseq_slice_ext=off") != nullptr;
}

// Why the extension is not enabled, from the prctl's errno. ENOTSUPP has three causes: a Linux
// 7.0+ kernel built without CONFIG_RSEQ_SLICE_EXTENSION, the feature turned off at boot, or an
// area registered in the legacy mode (its original 32 bytes: glibc 2.36 registers so). percpu's
// own area is registered with the kernel's feature size, so with it the first cause remains
// once the command line is ruled out.
void explain(slice_support& s, bool own_area) {
  switch (s.error) {
    case 0:
      s.kernel_offers = true;
      s.reason = "enabled";
      return;
    case EINVAL:
      s.reason =
          "not offered by this kernel (prctl PR_RSEQ_SLICE_EXTENSION: EINVAL, a kernel "
          "before 7.0)";
      return;
    case kEnotsupp:
      if (disabled_at_boot()) {
        s.kernel_offers = true;
        s.reason = "turned off on the kernel command line (rseq_slice_ext=0; ENOTSUPP)";
      } else if (own_area) {
        s.reason =
            "not offered by this kernel (ENOTSUPP: built without "
            "CONFIG_RSEQ_SLICE_EXTENSION)";
      } else {
        s.reason =
            "not available (ENOTSUPP): the kernel is built without "
            "CONFIG_RSEQ_SLICE_EXTENSION, or glibc registered its rseq area in the legacy "
            "32-byte mode, as glibc 2.36 does (GLIBC_TUNABLES=glibc.pthread.rseq=0 lets "
            "percpu register its own area with the kernel's feature size)";
      }
      return;
    case ENXIO:
      s.kernel_offers = true;
      s.reason = "unavailable: no rseq area registered for this thread (ENXIO)";
      return;
    default:
      s.reason = std::string("prctl PR_RSEQ_SLICE_EXTENSION failed: ") + std::strerror(s.error);
  }
}

// Enables the extension for the calling thread and records the answer: 0, or the errno (ENXIO
// in fallback mode). One prctl, no allocation and no lock; errno is kept.
int try_enable() noexcept {
  const int saved = errno;
  (void)current_cpu();  // registers percpu's own area on this thread where percpu owns it
  int err = 0;
  if (!rseq_active()) {
    err = ENXIO;
  } else if (prctl(PR_RSEQ_SLICE_EXTENSION, PR_RSEQ_SLICE_EXTENSION_SET, PR_RSEQ_SLICE_EXT_ENABLE,
                   0, 0) != 0) {
    err = errno;
  }
  detail::t_slice_state = err == 0 ? 1 : 2;
  errno = saved;
  return err;
}

}  // namespace

slice_support enable_slice_extension() {
  slice_support s;
  const registration_info info = registration();
  s.error = try_enable();
  if (s.error == ENXIO && !rseq_active()) {
    s.reason = "unavailable in fallback mode (no rseq area; ENXIO)";
  } else {
    explain(s, info.owner == area_owner::percpu);
  }
  s.enabled = s.error == 0;
  return s;
}

slice_stats this_thread_slice_stats() noexcept {
  return detail::t_slice_stats;
}

namespace detail {

bool slice_request_first() noexcept {
  (void)try_enable();
  return slice_request();
}

void slice_yield_granted() noexcept {
  ++t_slice_stats.granted;
#if defined(__x86_64__) || defined(__aarch64__)
  if (syscall(kSysRseqSliceYield) == 1) ++t_slice_stats.yielded;
#endif
}

}  // namespace detail
}  // namespace percpu
