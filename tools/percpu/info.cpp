// `percpu info`: what the kernel, the C library and percpu agreed on in this process.
#include <fmt/core.h>
#include <gnu/libc-version.h>
#include <sys/utsname.h>

#include <fstream>
#include <string>
#include <vector>

#include <percpu/percpu.h>

#include "commands.h"

namespace percpu::cli {

namespace {

// The online CPUs of each NUMA node, as sysfs lists them (/sys/devices/system/node/nodeN/
// cpulist), in node order: [{"node": 0, "cpus": "0-3"}, ...]. A node whose file is missing (a
// kernel without NUMA) is left out.
nlohmann::json node_cpus(const std::vector<int>& nodes) {
  nlohmann::json out = nlohmann::json::array();
  for (int node : nodes) {
    std::ifstream in("/sys/devices/system/node/node" + std::to_string(node) + "/cpulist");
    std::string list;
    if (in && std::getline(in, list)) out.push_back({{"node", node}, {"cpus", list}});
  }
  return out;
}

}  // namespace

nlohmann::json info_json() {
  const registration_info reg = registration();
  const topology& topo = machine_topology();
  nlohmann::json j;

  utsname u{};
  uname(&u);
  j["kernel"] = {{"release", u.release}, {"machine", u.machine}};
  j["libc"] = {{"name", "glibc"}, {"version", gnu_get_libc_version()}};

  j["rseq"] = {
      {"mode", reg.fallback ? "fallback" : "rseq"},
      {"owner", to_string(reg.owner)},
      {"fallback_reason", reg.fallback_reason},
      {"registration_errno", reg.registration_errno},
      {"glibc_reason", reg.glibc_reason},
      {"glibc_symbols_resolved", reg.glibc_symbols},
      {"glibc_rseq_size", reg.glibc_rseq_size},
      {"at_rseq_feature_size", reg.feature_size},
      {"at_rseq_align", reg.alignment},
      {"area_extent", reg.area_extent},
      {"rseq_offset", reg.rseq_offset},
      {"usable_fields",
       {{"cpu_id", reg.owner != area_owner::none},
        {"node_id", reg.fields.node_id},
        {"mm_cid", reg.fields.mm_cid}}},
      {"membarrier_rseq", membarrier_rseq_available()},
      {"fallback_switches", fallback_switches()},
  };

  // Time-slice extension: enabling it on this thread is how to learn what the kernel offers.
  const slice_support slice = enable_slice_extension();
  j["slice_extension"] = {{"kernel_offers", slice.kernel_offers},
                          {"enabled", slice.enabled},
                          {"errno", slice.error},
                          {"reason", slice.reason}};

  const cpu_node pair = current_cpu_node();
  j["current"] = {{"cpu", current_cpu()},
                  {"node", current_node()},
                  {"mm_cid", current_mm_cid()},
                  {"pair", {{"cpu", pair.cpu}, {"node", pair.node}}}};

  j["topology"] = {{"possible_cpus", format_cpu_list(topo.possible_cpus)},
                   {"possible_count", topo.possible_cpus.size()},
                   {"possible_source", topo.possible_source},
                   {"online_cpus", format_cpu_list(topo.online_cpus)},
                   {"allowed_cpus", format_cpu_list(topo.allowed_cpus)},
                   {"nodes", format_cpu_list(topo.nodes)},
                   {"node_cpus", node_cpus(topo.nodes)},
                   {"cpu_id_bound", topo.cpu_id_bound},
                   {"mm_cid_bound", topo.mm_cid_bound},
                   {"kernel_cpu_limit", topo.kernel_cpu_limit},
                   {"mismatch", topo.mismatch}};
  return j;
}

std::string environment_line(const nlohmann::json& info) {
  return fmt::format(
      "Linux {} ({}), glibc {}, online CPUs {}, rseq mode {} (area registered by {})",
      info["kernel"].value("release", "?"), info["kernel"].value("machine", "?"),
      info["libc"].value("version", "?"), info["topology"].value("online_cpus", "?"),
      info["rseq"].value("mode", "?"), info["rseq"].value("owner", "?"));
}

void print_info(const nlohmann::json& j) {
  const auto& r = j["rseq"];
  const auto& f = r["usable_fields"];
  auto yes = [](bool b) { return b ? "yes" : "no"; };
  fmt::print("kernel            {} ({})\n", j["kernel"]["release"].get<std::string>(),
             j["kernel"]["machine"].get<std::string>());
  fmt::print("libc              glibc {}\n", j["libc"]["version"].get<std::string>());
  fmt::print("mode              {}\n", r["mode"].get<std::string>());
  if (r["mode"] == "fallback")
    fmt::print("  why             {}\n", r["fallback_reason"].get<std::string>());
  fmt::print("area registered by {}\n", r["owner"].get<std::string>());
  if (!r["glibc_reason"].get<std::string>().empty())
    fmt::print("  not glibc's     {}\n", r["glibc_reason"].get<std::string>());
  fmt::print("glibc symbols     {} (__rseq_size = {})\n",
             r["glibc_symbols_resolved"].get<bool>() ? "resolved" : "absent",
             r["glibc_rseq_size"].get<unsigned>());
  fmt::print("AT_RSEQ_FEATURE_SIZE {}   AT_RSEQ_ALIGN {}   area extent {} bytes\n",
             r["at_rseq_feature_size"].get<unsigned long>(),
             r["at_rseq_align"].get<unsigned long>(), r["area_extent"].get<unsigned>());
  if (r["at_rseq_feature_size"].get<unsigned long>() == 0)
    fmt::print(
        "  feature size    not reported by the kernel (before 6.3): it fills the original {} "
        "bytes, no node_id, no mm_cid\n",
        abi::kOriginalFeatureSize);
  fmt::print("usable fields     cpu_id {}, node_id {}, mm_cid {}\n", yes(f["cpu_id"]),
             yes(f["node_id"]), yes(f["mm_cid"]));
  if (r["mode"] == "rseq" && !f["mm_cid"].get<bool>())
    fmt::print("  instead         mm_cid mode uses cpu_id{}\n",
               f["node_id"].get<bool>() ? "" : "; the node comes from getcpu()");
  fmt::print("membarrier RSEQ   {}\n", yes(r["membarrier_rseq"]));
  fmt::print("slice extension   {}\n", j["slice_extension"]["reason"].get<std::string>());
  const auto& c = j["current"];
  fmt::print("current           cpu {}, node {}, mm_cid {}\n", c["cpu"].get<int>(),
             c["node"].get<int>(), c["mm_cid"].get<int>());
  const auto& t = j["topology"];
  fmt::print("possible CPUs     {} ({} CPUs, from {})\n", t["possible_cpus"].get<std::string>(),
             t["possible_count"].get<size_t>(), t["possible_source"].get<std::string>());
  fmt::print("online CPUs       {}\n", t["online_cpus"].get<std::string>());
  fmt::print("allowed CPUs      {}\n", t["allowed_cpus"].get<std::string>());
  std::string per_node;
  for (const auto& n : t["node_cpus"])
    per_node += fmt::format("{}node {}: CPUs {}", per_node.empty() ? " (" : "; ",
                            n["node"].get<int>(), n["cpus"].get<std::string>());
  if (!per_node.empty()) per_node += ")";
  fmt::print("NUMA nodes        {}{}\n", t["nodes"].get<std::string>(), per_node);
  const int limit = t["kernel_cpu_limit"].get<int>();
  fmt::print(
      "kernel CPU limit  {}\n",
      limit > 0
          ? fmt::format("CPU ids below {} (the CPU mask size sched_getaffinity accepts)", limit)
          : std::string("unknown (sched_getaffinity could not be probed)"));
  fmt::print("index spaces      cpu_id [0, {}), mm_cid [0, {})\n", t["cpu_id_bound"].get<int>(),
             t["mm_cid_bound"].get<int>());
  if (!t["mismatch"].get<std::string>().empty())
    fmt::print("  mismatch        {}\n", t["mismatch"].get<std::string>());
}

}  // namespace percpu::cli
