// percpu malloc's large allocations (above the size classes) in programs as people run them:
// each case of malloc_large_program runs with glibc's malloc and with percpu malloc preloaded,
// and percpu malloc must do what glibc does (and reuse memory as well as it).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>

#include "shell.h"

namespace {

using percpu::test::shell;

struct run_result {
  int status;
  std::string out;
};

// Runs `program` with `args`, with percpu malloc preloaded or not.
run_result run_case(const std::string& args, bool preload,
                    const char* program = PERCPU_MALLOC_LARGE_PROGRAM_PATH) {
  const std::string cmd = std::string(preload ? "LD_PRELOAD=" PERCPU_MALLOC_LIBRARY_PATH " " : "") +
                          program + " " + args;
  const auto r = shell(cmd);
  return {r.status, r.out};
}

// The same case under glibc's malloc and under percpu malloc.
struct both_results {
  run_result glibc, ours;
};
both_results run_both(const std::string& args,
                      const char* program = PERCPU_MALLOC_LARGE_PROGRAM_PATH) {
  return {run_case(args, false, program), run_case(args, true, program)};
}

// The number after `key` in `out`, or -1.
double value_after(const std::string& out, const std::string& key) {
  const auto at = out.find(key + " ");
  if (at == std::string::npos) return -1;
  return std::strtod(out.c_str() + at + key.size() + 1, nullptr);
}

TEST(MallocLarge, OneMiBChurnReusesItsMemoryWithoutFaults) {
  // Each block used to be a mapping of its own: 256 page faults per 1 MiB block. Freed large
  // spans now stay in the page heap and the next block reuses them.
  const auto [glibc, ours] = run_both("churn 2000");
  ASSERT_EQ(ours.status, 0) << ours.out;
  const double faults = value_after(ours.out, "faults_per_iteration");
  ASSERT_GE(faults, 0) << ours.out;
  EXPECT_LT(faults, 2.0) << "glibc: " << glibc.out << "percpu: " << ours.out;
}

TEST(MallocLarge, ReallocGrowthByPagesMovesTheBlockLogarithmicallyOften) {
  // 16 MiB grown 4 KiB at a time: 4096 reallocs. Growth happens in place while the free span
  // after the block lasts, and a move at least doubles the block, so the copies add up to a
  // few times the final size instead of one copy per step (36 s before, against 0.17 s).
  const auto [glibc, ours] = run_both("realloc 16");
  ASSERT_EQ(glibc.status, 0) << glibc.out;
  ASSERT_EQ(ours.status, 0) << ours.out;
  EXPECT_NE(ours.out.find(" ok"), std::string::npos) << ours.out;
  const double moves = value_after(ours.out, "moves");
  EXPECT_GE(moves, 0) << ours.out;
  EXPECT_LE(moves, 40) << "glibc: " << glibc.out << "percpu: " << ours.out;
}

TEST(MallocLarge, SeventyThousandLive300KiBBlocksAsGlibcGrantsThem) {
  // One mapping per block hit vm.max_map_count (65,530) after 65,524 blocks; blocks are spans
  // of large regions now. 70,000 x 300 KiB is 21 GB of address space, never touched.
  const auto [glibc, ours] = run_both("live 70000 307200");
  ASSERT_EQ(ours.status, 0) << ours.out;
  EXPECT_GE(value_after(ours.out, "live"), value_after(glibc.out, "live"))
      << "glibc: " << glibc.out << "percpu: " << ours.out;
}

TEST(MallocLarge, AbsurdSizesGetWhatGlibcGets) {
  // 64 GiB, 1 TiB and 16 TiB on a machine with far less memory: glibc's mmap is refused by the
  // kernel's commit accounting (NULL, ENOMEM); percpu's regions were mapped MAP_NORESERVE and
  // granted them. Whatever this machine's overcommit policy says, both must agree.
  const auto [glibc, ours] = run_both("huge");
  ASSERT_EQ(glibc.status, 0) << glibc.out;
  ASSERT_EQ(ours.status, 0) << ours.out;
  EXPECT_EQ(ours.out, glibc.out);
}

TEST(MallocLarge, AddressSpaceHeldInCachesIsGivenBackBeforeARequestFails) {
  // Under RLIMIT_AS = 1,000,000 KiB: 700 MB of 200-byte objects allocated and freed, then 200
  // blocks of 1 MiB. The freed objects' address space must not make those fail.
  const auto [glibc, ours] = run_both("rlimit 1000000");
  ASSERT_EQ(ours.status, 0) << ours.out;
  EXPECT_GE(value_after(ours.out, "after_free"), value_after(glibc.out, "after_free"))
      << "glibc: " << glibc.out << "percpu: " << ours.out;
}

TEST(MallocGlibcApi, ABlockFromADeepBoundLibraryGoesToTheAllocatorThatMadeIt) {
  // The library's malloc is libc's (RTLD_DEEPBIND); the program's free, realloc and
  // malloc_usable_size are percpu malloc's, which hands a pointer outside its memory to the
  // next allocator. It used to stop the process ("invalid pointer").
  const std::string args = "deepbind " PERCPU_TEST_DEEPBIND_PATH;
  const auto ours = run_case(args + " 2>&1", true, PERCPU_MALLOC_GLIBC_API_PROGRAM_PATH);
  EXPECT_EQ(ours.status, 0) << ours.out;
  EXPECT_EQ(ours.out, "deepbind ok\n");
}

TEST(MallocGlibcApi, IntrospectionReportsPercpuMallocsOwnFigures) {
  // With ~110 MB live: mallinfo2 said 0 (glibc's empty heap) under the preload.
  const auto [glibc, ours] = run_both("info", PERCPU_MALLOC_GLIBC_API_PROGRAM_PATH);
  ASSERT_EQ(ours.status, 0) << ours.out;
  const double arena = value_after(ours.out, "arena");
  const double used = value_after(ours.out, "uordblks");
  EXPECT_GE(used, 110e6) << ours.out;  // 110,000 x 1000 bytes, at their class size
  EXPECT_LT(used, 150e6) << ours.out;
  EXPECT_GE(arena, used) << ours.out;
  EXPECT_EQ(value_after(ours.out, "trim"), 1) << "memory was returned: " << ours.out;
  EXPECT_EQ(value_after(ours.out, "mallopt"), value_after(glibc.out, "mallopt"))
      << "glibc: " << glibc.out << "percpu: " << ours.out;
  EXPECT_EQ(value_after(ours.out, "info"), 1) << ours.out;
}

}  // namespace
