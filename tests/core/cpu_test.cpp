#include <gtest/gtest.h>
#include <sched.h>
#include <unistd.h>

#include <percpu/percpu.h>
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "pin.h"

namespace {

// The fast path's words (runtime.h): once initialized, each holds its offset and its index
// space's bound, as the separate fields do; mm_cid's offset is the field mm_cid mode reads.
TEST(GetcpuCache, ItsWordsHoldTheOffsetsAndBoundsInitializationSet) {
  const percpu::registration_info reg = percpu::registration();
  const auto& hot = percpu::detail::g_hot;
  const percpu::topology& t = percpu::machine_topology();
  ASSERT_NE(hot.cpu_word, 0u) << "an area offset that does not fit in 32 bits?";
  EXPECT_EQ(static_cast<std::int32_t>(hot.cpu_word), reg.rseq_offset);
  EXPECT_EQ(hot.cpu_word >> 32, static_cast<std::uint64_t>(t.cpu_id_bound));
  EXPECT_EQ(
      static_cast<std::int32_t>(hot.mm_cid_word),
      reg.rseq_offset + (reg.fields.mm_cid ? percpu::abi::kOffMmCid : percpu::abi::kOffCpuId));
  EXPECT_EQ(hot.mm_cid_word >> 32, static_cast<std::uint64_t>(t.mm_cid_bound));
  EXPECT_EQ(percpu::detail::load_invariant<&percpu::detail::hot_state::cpu_word>(), hot.cpu_word);
}

// The inlined fast path loads its word once per loop (load_invariant()), but the index itself
// on every call: a loop that moves the thread between reads sees every CPU it was moved to.
TEST(GetcpuCache, ALoopThatMovesTheThreadReadsEachCpu) {
  for (int round = 0; round < 3; ++round)
    for (int cpu : percpu::machine_topology().allowed_cpus) {
      percpu::test::pinned pin(cpu);
      ASSERT_TRUE(pin.ok());
      EXPECT_EQ(percpu::current_cpu(), cpu);
      int index = -1;
      ASSERT_TRUE(percpu::detail::try_current_cpu(index) || !percpu::rseq_active());
      if (percpu::rseq_active()) {
        EXPECT_EQ(index, cpu);
      }
    }
}

TEST(GetcpuCache, ReportsTheCpuTheThreadIsPinnedTo) {
  for (int cpu : percpu::machine_topology().allowed_cpus) {
    percpu::test::pinned pin(cpu);
    ASSERT_TRUE(pin.ok());
    EXPECT_EQ(percpu::current_cpu(), cpu);
    EXPECT_EQ(percpu::current_cpu_node().cpu, cpu);
    unsigned c = 0, node = 0;
    ASSERT_EQ(getcpu(&c, &node), 0);
    EXPECT_EQ(percpu::current_node(), static_cast<int>(node));
    EXPECT_EQ(percpu::current_cpu_node().node, static_cast<int>(node));
  }
}

// The node sysfs files name for `cpu` (/sys/devices/system/node/nodeK/cpuN), or -1 when no node
// lists it (a kernel built without NUMA has no node folders).
int sysfs_node_of(int cpu) {
  for (int node : percpu::machine_topology().nodes) {
    const std::string path =
        "/sys/devices/system/node/node" + std::to_string(node) + "/cpu" + std::to_string(cpu);
    if (access(path.c_str(), F_OK) == 0) return node;
  }
  return -1;
}

TEST(GetcpuCache, NodeIsTheOneSysfsListsOnEveryCpu) {
  // Against the kernel's topology, not against getcpu(): the same node on every CPU would pass
  // a getcpu() comparison if both read a stale field. On a multi-node VM this covers each node.
  std::set<int> nodes_seen;
  for (int cpu : percpu::machine_topology().allowed_cpus) {
    const int node = sysfs_node_of(cpu);
    if (node < 0) GTEST_SKIP() << "sysfs lists no NUMA node for CPU " << cpu;
    percpu::test::pinned pin(cpu);
    ASSERT_TRUE(pin.ok());
    EXPECT_EQ(percpu::current_node(), node) << "CPU " << cpu;
    const auto pair = percpu::current_cpu_node();
    EXPECT_EQ(pair.cpu, cpu);
    EXPECT_EQ(pair.node, node) << "CPU " << cpu;
    nodes_seen.insert(node);
  }
  std::printf("nodes covered: %zu of %zu\n", nodes_seen.size(),
              percpu::machine_topology().nodes.size());
}

TEST(GetcpuCache, IndicesStayInsideTheirSpaces) {
  const auto& t = percpu::machine_topology();
  for (int i = 0; i < 1000; ++i) {
    const int cpu = percpu::current_cpu();
    EXPECT_GE(cpu, 0);
    EXPECT_LT(cpu, t.cpu_id_bound);
    const int cid = percpu::current_mm_cid();
    EXPECT_GE(cid, 0);
    EXPECT_LT(cid, t.mm_cid_bound);
    EXPECT_GE(percpu::current_node(), 0);
  }
}

TEST(GetcpuCache, NewThreadsGetValidValuesOnFirstUse) {
  const auto& t = percpu::machine_topology();
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 16; ++i) {
    threads.emplace_back([&] {
      const int cpu = percpu::current_cpu();
      const int cid = percpu::current_mm_cid();
      const auto pair = percpu::current_cpu_node();
      if (cpu < 0 || cpu >= t.cpu_id_bound || cid < 0 || cid >= t.mm_cid_bound || pair.cpu < 0 ||
          pair.node < 0)
        bad.fetch_add(1);
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
}

TEST(GetcpuCache, MmCidIsDenseForConcurrentThreads) {
  // The ids stay below both the number of threads and the mm_cid index space (sized from the
  // possible CPUs): memory indexed by them follows the threads. Not below the allowed CPUs: the
  // kernel bounds them by the CPUs in the affinity masks, and an offline CPU stays in a mask
  // (seen on Linux 7.2 with CPU 3 of 6 offline: ids 0-5 with 5 CPUs allowed).
  if (!percpu::registration().fields.mm_cid) GTEST_SKIP() << "kernel lacks mm_cid";
  constexpr int kThreads = 8;
  std::set<int> seen;
  std::mutex m;
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&] {
      for (int k = 0; k < 1000; ++k) {
        const int cid = percpu::current_mm_cid();
        std::lock_guard<std::mutex> lock(m);
        seen.insert(cid);
      }
    });
  }
  for (auto& th : threads) th.join();
  const int bound = std::min(kThreads + 1, percpu::machine_topology().mm_cid_bound);  // + main
  EXPECT_LE(seen.size(), static_cast<std::size_t>(bound));
  EXPECT_LT(*seen.rbegin(), bound);
}

TEST(GetcpuCache, PairIsConsistentWhileMigrating) {
  // A thread keeps moving between CPUs while reading pairs; each pair must name a CPU and that
  // CPU's own node (from sysfs-free ground truth: getcpu() while pinned).
  std::vector<int> node_of(percpu::machine_topology().cpu_id_bound, -1);
  for (int cpu : percpu::machine_topology().allowed_cpus) {
    percpu::test::pinned pin(cpu);
    unsigned c, n;
    getcpu(&c, &n);
    node_of[cpu] = static_cast<int>(n);
  }
  std::atomic<bool> stop{false};
  std::atomic<int> bad{0};
  std::thread reader([&] {
    while (!stop.load(std::memory_order_relaxed)) {
      const auto p = percpu::current_cpu_node();
      if (p.cpu < 0 || p.cpu >= static_cast<int>(node_of.size()) || node_of[p.cpu] != p.node)
        bad.fetch_add(1);
    }
  });
  const auto native = reader.native_handle();
  for (int round = 0; round < 200; ++round) {
    for (int cpu : percpu::machine_topology().allowed_cpus) {
      cpu_set_t one;
      CPU_ZERO(&one);
      CPU_SET(cpu, &one);
      pthread_setaffinity_np(native, sizeof(one), &one);
    }
  }
  stop = true;
  reader.join();
  EXPECT_EQ(bad.load(), 0);
}

}  // namespace
