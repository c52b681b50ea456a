// CPU and NUMA topology: the index spaces per-CPU data is sized by.
//
// Per-CPU storage is sized by the possible CPUs (every CPU id the kernel may ever report,
// including CPUs hot-plugged later), never by CPU_SETSIZE, the online count or an affinity mask.
#pragma once

#define PERCPU_PUBLIC_HEADER 1  // lets it include percpu/internal/

#include <string>
#include <vector>

#include "percpu/internal/config.h"

namespace percpu {

/// Parses a kernel CPU/node list such as "0-3,8,10-11" (sysfs `possible`, `online`, `cpulist`).
/// Returns the ids in increasing order without duplicates; an empty vector for an empty or
/// malformed string (callers fall back to another source).
PERCPU_API std::vector<int> parse_cpu_list(const std::string& text);

/// Formats ids as a kernel list ("0-3,8"), the inverse of parse_cpu_list.
PERCPU_API std::string format_cpu_list(const std::vector<int>& ids);

/// The machine's topology, read once from sysfs (with fallbacks when files are missing) and
/// checked against what the kernel itself says (the affinity mask, the size of the CPU mask it
/// accepts): a container may show a sysfs view that differs from the CPUs the kernel reports.
struct topology {
  /// Possible CPU ids (/sys/devices/system/cpu/possible; else sysconf(_SC_NPROCESSORS_CONF)).
  std::vector<int> possible_cpus;
  /// Online CPU ids (/sys/devices/system/cpu/online; else the possible CPUs).
  std::vector<int> online_cpus;
  /// CPUs the calling thread could run on at startup (sched_getaffinity): CPU ids the kernel
  /// reports for certain, whatever sysfs says.
  std::vector<int> allowed_cpus;
  /// Possible NUMA node ids (/sys/devices/system/node/possible; else {0}).
  std::vector<int> nodes;
  /// Size of the cpu_id index space: highest possible CPU id + 1 (the kernel's nr_cpu_ids).
  int cpu_id_bound = 1;
  /// Size of the mm_cid index space: mm_cid is always below nr_cpu_ids (and in practice below
  /// min(threads, allowed CPUs)).
  int mm_cid_bound = 1;
  /// Where possible_cpus came from ("sysfs" or "sysconf"), for `percpu info`.
  std::string possible_source;
  /// The kernel's limit on CPU ids: the fewest bits of CPU mask that sched_getaffinity(2)
  /// accepts (nr_cpu_ids rounded up to a multiple of 64); 0 when it could not be probed.
  int kernel_cpu_limit = 0;
  /// Empty when sysfs, the affinity mask and the kernel agree; otherwise what disagreed and how
  /// the index spaces were sized because of it (shown by `percpu info`).
  std::string mismatch;
};

/// Sizes the index spaces of `t` (cpu_id_bound, mm_cid_bound) from every source that bounds the
/// CPU ids the kernel can report: the possible, online and allowed CPUs, and, when those
/// disagree (an online or allowed CPU outside the possible list, or no sysfs list at all), the
/// kernel's limit t.kernel_cpu_limit as well; never beyond that limit when it is known (no id
/// the kernel reports reaches it). Sets t.mismatch to say what disagreed.
PERCPU_API void size_index_spaces(topology& t);

/// The kernel's limit on CPU ids, probed with the raw sched_getaffinity(2) system call, which
/// fails with EINVAL for a mask shorter than nr_cpu_ids bits: the smallest accepted mask, in
/// bits (a multiple of 64). 0 when the probe fails (a seccomp filter, an emulator). Throws
/// std::bad_alloc.
PERCPU_API int probe_kernel_cpu_limit();

/// The topology of this machine, read on first call. Thread-safe.
PERCPU_API const topology& machine_topology();

/// Reads a topology from a sysfs root (normally "/sys"), with the calling thread's affinity
/// mask and the kernel's limit, and sizes its index spaces (size_index_spaces()); exposed so
/// tests can feed odd files.
PERCPU_API topology read_topology(const std::string& sysfs_root);

}  // namespace percpu
