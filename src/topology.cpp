#include "percpu/topology.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>

#include "never_destroyed.h"

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

// The file's first line, without its newline; empty when it cannot be read. Plain read(2), not
// an ifstream: this runs while libpercpu loads, and the streams' locale setup would touch about
// 0.5 MiB of libstdc++ in every process, C programs under percpu malloc included.
std::string read_first_line(const std::string& path) {
  std::string line;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return line;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    const auto* end = static_cast<const char*>(std::memchr(buf, '\n', static_cast<std::size_t>(n)));
    line.append(buf,
                end != nullptr ? static_cast<std::size_t>(end - buf) : static_cast<std::size_t>(n));
    if (end != nullptr) break;
  }
  ::close(fd);
  return line;
}

// The CPUs the calling thread may run on, with a mask as large as the kernel uses.
std::vector<int> allowed_cpus() {
  std::vector<int> ids;
  for (std::size_t n = CPU_SETSIZE; n <= static_cast<std::size_t>(kMaxCpuId); n *= 2) {
    cpu_set_t* set = CPU_ALLOC(n);
    if (set == nullptr) break;
    const std::size_t bytes = CPU_ALLOC_SIZE(n);
    CPU_ZERO_S(bytes, set);
    const bool ok = sched_getaffinity(0, bytes, set) == 0;
    if (ok)
      for (std::size_t i = 0; i < n; ++i)
        if (CPU_ISSET_S(i, bytes, set)) ids.push_back(static_cast<int>(i));
    CPU_FREE(set);
    if (ok || errno != EINVAL) break;
  }
  return ids;
}

}  // namespace

std::vector<int> parse_cpu_list(const std::string& text) {
  std::string s;
  for (char c : text)
    if (!std::isspace(static_cast<unsigned char>(c))) s += c;
  std::vector<int> ids;
  if (s.empty()) return ids;
  for (std::size_t start = 0; start <= s.size();) {
    std::size_t comma = s.find(',', start);
    if (comma == std::string::npos) comma = s.size();
    const std::string part = s.substr(start, comma - start);
    start = comma + 1;
    if (part.empty() && start > s.size()) break;  // a trailing comma, as getline read it
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

  t.allowed_cpus = allowed_cpus();
  t.nodes = parse_cpu_list(read_first_line(sysfs_root + "/devices/system/node/possible"));
  if (t.nodes.empty()) t.nodes = {0};
  t.kernel_cpu_limit = probe_kernel_cpu_limit();
  size_index_spaces(t);
  return t;
}

void size_index_spaces(topology& t) {
  auto highest = [](const std::vector<int>& ids) { return ids.empty() ? -1 : ids.back(); };
  const int listed =
      std::max({highest(t.possible_cpus), highest(t.online_cpus), highest(t.allowed_cpus), 0}) + 1;
  std::string why;
  if (t.possible_source != "sysfs") {
    why = "no readable sysfs list of possible CPUs";
  } else if (highest(t.online_cpus) > highest(t.possible_cpus)) {
    why = "online CPUs " + format_cpu_list(t.online_cpus) + " lie outside the possible CPUs " +
          format_cpu_list(t.possible_cpus);
  } else if (highest(t.allowed_cpus) > highest(t.possible_cpus)) {
    why = "the kernel lets this process run on CPUs " + format_cpu_list(t.allowed_cpus) +
          ", outside the possible CPUs " + format_cpu_list(t.possible_cpus) + " sysfs shows";
  }
  // Where the sources disagree, one of them is a partial view (a container's sysfs, a hot-added
  // CPU): only the kernel's own limit bounds what cpu_id and mm_cid can be.
  int bound = listed;
  t.mismatch.clear();
  if (!why.empty()) {
    bound = std::max(listed, t.kernel_cpu_limit);
    t.mismatch = why + "; index spaces sized " + std::to_string(bound) +
                 (t.kernel_cpu_limit > 0 ? " (the kernel's CPU mask size)"
                                         : " (the kernel's CPU mask size is unknown)");
  }
  // A sysfs that lists more CPUs than the kernel accepts in a mask (a view of another machine,
  // a bind-mounted file) would only waste memory: no id reaches the kernel's limit.
  if (t.kernel_cpu_limit > 0 && bound > t.kernel_cpu_limit) {
    t.mismatch = "sysfs lists CPU ids up to " + std::to_string(bound - 1) +
                 ", beyond the kernel's limit; index spaces sized " +
                 std::to_string(t.kernel_cpu_limit) + " (the kernel's CPU mask size)";
    bound = t.kernel_cpu_limit;
  }
  t.cpu_id_bound = bound;
  // mm_cid is below nr_cpu_ids too (and in practice below min(threads, allowed CPUs)).
  t.mm_cid_bound = bound;
}

int probe_kernel_cpu_limit() {
  // The raw system call: glibc's wrapper hides the kernel's length rules. Lengths are in whole
  // longs; double until the kernel accepts one, then narrow down to the shortest it accepts.
  constexpr std::size_t kMaxLongs = kMaxCpuId / 64;
  std::vector<unsigned long> mask;  // written by the kernel, contents unused
  auto accepts = [&mask](std::size_t longs) {
    mask.resize(longs);
    return syscall(SYS_sched_getaffinity, 0, longs * sizeof(unsigned long), mask.data()) > 0;
  };
  std::size_t hi = 1;
  while (!accepts(hi)) {
    if (errno != EINVAL || hi * 2 > kMaxLongs) return 0;
    hi *= 2;
  }
  std::size_t lo = hi / 2;  // refused (or 0)
  while (hi - lo > 1) {
    const std::size_t mid = (lo + hi) / 2;
    (accepts(mid) ? hi : lo) = mid;
  }
  return static_cast<int>(hi * 64);
}

const topology& machine_topology() {
  // Never destroyed: threads still running after exit() began (a pool joined from a static
  // destructor, a detached thread) size and check their indices with it.
  static detail::never_destroyed<const topology> t(read_topology("/sys"));
  return t.get();
}

}  // namespace percpu
