#include "percpu/topology.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <sstream>

namespace percpu {
namespace {

// Upper bound on a plausible CPU id: rejects garbage that would make us size arrays absurdly.
constexpr long kMaxCpuId = 1 << 20;

bool parse_number(const std::string& s, long& out) {
  if (s.empty() || s.size() > 9) return false;
  for (char c : s)
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  out = std::stol(s);
  return out <= kMaxCpuId;
}

std::string read_first_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  if (in) std::getline(in, line);
  return line;
}

}  // namespace

std::vector<int> parse_cpu_list(const std::string& text) {
  std::string s;
  for (char c : text)
    if (!std::isspace(static_cast<unsigned char>(c))) s += c;
  std::vector<int> ids;
  if (s.empty()) return ids;
  std::stringstream ss(s);
  std::string part;
  while (std::getline(ss, part, ',')) {
    long lo = 0, hi = 0;
    const auto dash = part.find('-');
    if (dash == std::string::npos) {
      if (!parse_number(part, lo)) return {};
      hi = lo;
    } else if (!parse_number(part.substr(0, dash), lo) ||
               !parse_number(part.substr(dash + 1), hi) || hi < lo) {
      return {};
    }
    for (long i = lo; i <= hi; ++i) ids.push_back(static_cast<int>(i));
  }
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

std::string format_cpu_list(const std::vector<int>& ids) {
  std::string out;
  for (size_t i = 0; i < ids.size();) {
    size_t j = i;
    while (j + 1 < ids.size() && ids[j + 1] == ids[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += std::to_string(ids[i]);
    if (j > i) out += '-' + std::to_string(ids[j]);
    i = j + 1;
  }
  return out;
}

topology read_topology(const std::string& sysfs_root) {
  topology t;
  const std::string cpu_dir = sysfs_root + "/devices/system/cpu/";
  t.possible_cpus = parse_cpu_list(read_first_line(cpu_dir + "possible"));
  t.possible_source = "sysfs";
  if (t.possible_cpus.empty()) {
    const long n = sysconf(_SC_NPROCESSORS_CONF);
    for (long i = 0; i < std::max(1L, n); ++i) t.possible_cpus.push_back(static_cast<int>(i));
    t.possible_source = "sysconf";
  }
  t.online_cpus = parse_cpu_list(read_first_line(cpu_dir + "online"));
  if (t.online_cpus.empty()) t.online_cpus = t.possible_cpus;

  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    for (int i = 0; i < CPU_SETSIZE; ++i)
      if (CPU_ISSET(i, &set)) t.allowed_cpus.push_back(i);
  }

  t.nodes = parse_cpu_list(read_first_line(sysfs_root + "/devices/system/node/possible"));
  if (t.nodes.empty()) t.nodes = {0};

  t.cpu_id_bound = t.possible_cpus.back() + 1;
  // The kernel reports CPUs only below nr_cpu_ids; an online CPU beyond "possible" would be a
  // sysfs inconsistency, so widen rather than index out of range.
  if (!t.online_cpus.empty()) t.cpu_id_bound = std::max(t.cpu_id_bound, t.online_cpus.back() + 1);
  t.mm_cid_bound = t.cpu_id_bound;
  return t;
}

const topology& machine_topology() {
  static const topology t = read_topology("/sys");
  return t;
}

}  // namespace percpu
