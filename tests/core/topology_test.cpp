#include <gtest/gtest.h>
#include <unistd.h>

#include <percpu/topology.h>
#include <algorithm>
#include <filesystem>
#include <fstream>

namespace {

using percpu::format_cpu_list;
using percpu::parse_cpu_list;

TEST(CpuList, ParsesRangesAndSingles) {
  EXPECT_EQ(parse_cpu_list("0-3,8,10-11\n"), (std::vector<int>{0, 1, 2, 3, 8, 10, 11}));
  EXPECT_EQ(parse_cpu_list("0"), (std::vector<int>{0}));
  EXPECT_EQ(parse_cpu_list(" 2-3 , 0 "), (std::vector<int>{0, 2, 3}));
}

TEST(CpuList, RejectsMalformed) {
  EXPECT_TRUE(parse_cpu_list("").empty());
  EXPECT_TRUE(parse_cpu_list("3-1").empty());
  EXPECT_TRUE(parse_cpu_list("a-b").empty());
  EXPECT_TRUE(parse_cpu_list("0-99999999999").empty());
  EXPECT_TRUE(parse_cpu_list("1,,2").empty());
}

TEST(CpuList, FormatsAsTheKernelDoes) {
  EXPECT_EQ(format_cpu_list({0, 1, 2, 3, 8, 10, 11}), "0-3,8,10-11");
  EXPECT_EQ(format_cpu_list({}), "");
}

class FakeSysfs : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = std::filesystem::temp_directory_path() /
            ("percpu-sysfs-" + std::to_string(getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(root_ / "devices/system/cpu");
    std::filesystem::create_directories(root_ / "devices/system/node");
  }
  void TearDown() override { std::filesystem::remove_all(root_); }
  void write(const std::string& rel, const std::string& text) {
    std::ofstream(root_ / rel) << text;
  }
  std::filesystem::path root_;
};

TEST_F(FakeSysfs, SparsePossibleCpusSizeTheIndexSpaceByTheHighestId) {
  write("devices/system/cpu/possible", "0-3,254-255\n");
  write("devices/system/cpu/online", "0-3\n");
  write("devices/system/node/possible", "0-1\n");
  const auto t = percpu::read_topology(root_.string());
  EXPECT_EQ(t.possible_cpus.size(), 6u);
  // The highest id, 255, sizes the space, unless this machine's kernel accepts fewer CPU ids:
  // then its limit does (IndexSpace.SizedFromEverySourceThatBoundsIt has both cases).
  const int expected = t.kernel_cpu_limit > 0 ? std::min(256, t.kernel_cpu_limit) : 256;
  EXPECT_EQ(t.cpu_id_bound, expected);
  EXPECT_EQ(t.mm_cid_bound, expected);
  EXPECT_EQ(t.online_cpus.size(), 4u);
  EXPECT_EQ(t.nodes, (std::vector<int>{0, 1}));
  EXPECT_EQ(t.possible_source, "sysfs");
}

TEST_F(FakeSysfs, MissingFilesFallBackToSysconf) {
  const auto t = percpu::read_topology(root_.string());
  EXPECT_EQ(t.possible_source, "sysconf");
  EXPECT_EQ(static_cast<long>(t.possible_cpus.size()), sysconf(_SC_NPROCESSORS_CONF));
  EXPECT_EQ(t.online_cpus, t.possible_cpus);
  EXPECT_EQ(t.nodes, (std::vector<int>{0}));
}

TEST_F(FakeSysfs, GarbageFallsBackToSysconf) {
  write("devices/system/cpu/possible", "all of them\n");
  const auto t = percpu::read_topology(root_.string());
  EXPECT_EQ(t.possible_source, "sysconf");
  EXPECT_GE(t.cpu_id_bound, 1);
}

TEST_F(FakeSysfs, ReadsOnlyTheFirstLineWhateverItsLength) {
  // No newline at the end; a second line ignored; a first line longer than one read (the list
  // 0,1,...,1499 is about 6,400 bytes, the reader's buffer 4 KiB).
  write("devices/system/cpu/possible", "0-7");
  write("devices/system/cpu/online", "0-3\n4-7\n");
  std::string many;
  for (int i = 0; i < 1500; ++i) many += (i ? "," : "") + std::to_string(i);
  write("devices/system/node/possible", many + "\n2000\n");
  const auto t = percpu::read_topology(root_.string());
  EXPECT_EQ(t.possible_cpus.size(), 8u);
  EXPECT_EQ(t.possible_source, "sysfs");
  EXPECT_EQ(t.online_cpus, (std::vector<int>{0, 1, 2, 3}));
  ASSERT_EQ(t.nodes.size(), 1500u);
  EXPECT_EQ(t.nodes.back(), 1499);
}

TEST(MachineTopology, CoversEveryCpuTheKernelReports) {
  const auto& t = percpu::machine_topology();
  ASSERT_FALSE(t.possible_cpus.empty());
  for (int cpu : t.online_cpus) EXPECT_LT(cpu, t.cpu_id_bound);
  for (int cpu : t.allowed_cpus) EXPECT_LT(cpu, t.cpu_id_bound);
}

}  // namespace
