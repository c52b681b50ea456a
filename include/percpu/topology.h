// CPU and NUMA topology: the index spaces per-CPU data is sized by.
//
// Per-CPU storage is sized by the possible CPUs (every CPU id the kernel may ever report,
// including CPUs hot-plugged later), never by CPU_SETSIZE, the online count or an affinity mask.
#pragma once

#include <string>
#include <vector>

#include "percpu/config.h"

namespace percpu {

/// Parses a kernel CPU/node list such as "0-3,8,10-11" (sysfs `possible`, `online`, `cpulist`).
/// Returns the ids in increasing order without duplicates; an empty vector for an empty or
/// malformed string (callers fall back to another source).
PERCPU_API std::vector<int> parse_cpu_list(const std::string& text);

/// Formats ids as a kernel list ("0-3,8"), the inverse of parse_cpu_list.
PERCPU_API std::string format_cpu_list(const std::vector<int>& ids);

/// The machine's topology, read once from sysfs (with fallbacks when files are missing).
struct topology {
  /// Possible CPU ids (/sys/devices/system/cpu/possible; else sysconf(_SC_NPROCESSORS_CONF)).
  std::vector<int> possible_cpus;
  /// Online CPU ids (/sys/devices/system/cpu/online; else the possible CPUs).
  std::vector<int> online_cpus;
  /// CPUs this thread may run on (sched_getaffinity), for information only.
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
};

/// The topology of this machine, read on first call. Thread-safe.
PERCPU_API const topology& machine_topology();

/// Reads a topology from a sysfs root (normally "/sys"); exposed so tests can feed odd files.
PERCPU_API topology read_topology(const std::string& sysfs_root);

}  // namespace percpu
