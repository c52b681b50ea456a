// `percpu info` tells the truth about the mode, including under a seccomp filter that makes
// rseq(2) fail; bad command lines are refused with an error.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "expect.h"
#include "shell.h"

namespace {

using percpu::test::shell;
using result = percpu::test::shell_result;

// Runs the percpu command with `args`; standard error joins standard output.
result run(const std::string& args) {
  return shell(std::string(PERCPU_CLI_PATH) + " " + args + " 2>&1");
}

// The tests of `percpu bench` run where the command has it: a build without PERCPU_BUILD_BENCH
// (the debug pass's) has none, and refuses it (ABuildWithoutBenchRefusesIt).
#define SKIP_WITHOUT_BENCH()                    \
  if (!PERCPU_CLI_HAS_BENCH)                    \
  GTEST_SKIP() << "built without percpu bench " \
                  "(PERCPU_BUILD_BENCH=OFF)"

nlohmann::json info(const std::string& prefix = "") {
  const auto r = run(prefix + "info --json");
  EXPECT_EQ(r.status, 0) << r.out;
  return nlohmann::json::parse(r.out);
}

TEST(Cli, InfoNamesTheModeThisPassExpects) {
  const std::string expected = percpu::test::expected_mode();
  if (expected.empty()) GTEST_SKIP() << "PERCPU_EXPECT not set";
  const auto j = info();
  if (expected == "fallback") {
    EXPECT_EQ(j["rseq"]["mode"], "fallback");
    EXPECT_NE(j["rseq"]["fallback_reason"].get<std::string>().find("ENOSYS"), std::string::npos);
    EXPECT_EQ(j["rseq"]["owner"], "none");
  } else {
    EXPECT_EQ(j["rseq"]["mode"], "rseq");
    EXPECT_EQ(j["rseq"]["owner"], expected);
  }
}

TEST(Cli, DenyRseqForcesFallbackAndInfoSaysWhy) {
  const std::string self = std::string(PERCPU_CLI_PATH);
  for (const std::string err : {"ENOSYS", "EPERM"}) {
    const auto j = info("deny-rseq --errno " + err + " -- " + self + " ");
    EXPECT_EQ(j["rseq"]["mode"], "fallback") << err;
    EXPECT_NE(j["rseq"]["fallback_reason"].get<std::string>().find(err), std::string::npos)
        << j["rseq"]["fallback_reason"];
    EXPECT_GE(j["current"]["cpu"].get<int>(), 0);
    EXPECT_GE(j["current"]["mm_cid"].get<int>(), 0);
  }
}

TEST(Cli, RefusesBadArguments) {
  SKIP_WITHOUT_BENCH();
  EXPECT_NE(run("bench --repetitions 0 getcpu").status, 0);
  EXPECT_NE(run("no-such-command").status, 0);
  EXPECT_NE(run("deny-rseq --errno EFOO -- true").status, 0);
  EXPECT_NE(run("deny-rseq").status, 0);
  EXPECT_NE(run("deny-rseq -- /nonexistent/program").status, 0);
  EXPECT_NE(run("bench --quick --json /nonexistent/dir/out.json getcpu").status, 0);
  EXPECT_NE(run("stress --structure nosuch").status, 0);
  EXPECT_NE(run("stress --threads 0").status, 0);
  EXPECT_NE(run("stress --mode percpu").status, 0);
  // The report: --json belongs to one suite; unknown suites and unwritable folders are refused
  // before anything runs.
  const auto json_without_suite = run("bench --json /tmp/x.json");
  EXPECT_EQ(json_without_suite.status >> 8, 2) << json_without_suite.out;
  EXPECT_NE(json_without_suite.out.find("--json is for one suite"), std::string::npos);
  EXPECT_NE(run("bench --suites getcpu,nosuch").status, 0);
  // --out and --suites belong to the report: with a suite named they would be ignored.
  const auto out_with_suite = run("bench --quick --out /tmp/percpu-never --suites getcpu pool");
  EXPECT_EQ(out_with_suite.status >> 8, 2) << out_with_suite.out;
  EXPECT_NE(out_with_suite.out.find("are for the report"), std::string::npos);
  EXPECT_EQ(run("bench --quick --out '' --suites getcpu").status >> 8, 2);
  const auto unwritable = run("bench --quick --suites getcpu --out /proc/percpu-report");
  EXPECT_NE(unwritable.status, 0);
  EXPECT_NE(unwritable.out.find("cannot write the report folder"), std::string::npos)
      << unwritable.out;
  // --allocators belongs to the malloc suite and to the report, which passes it on.
  const auto allocators_elsewhere = run("bench getcpu --quick --allocators glibc");
  EXPECT_EQ(allocators_elsewhere.status >> 8, 2) << allocators_elsewhere.out;
  EXPECT_NE(allocators_elsewhere.out.find("--allocators is for the malloc suite"),
            std::string::npos)
      << allocators_elsewhere.out;
  EXPECT_NE(run("bench --allocators glibc,nosuch").status, 0);
}

TEST(Cli, ABuildWithoutBenchRefusesIt) {
  if (PERCPU_CLI_HAS_BENCH) GTEST_SKIP() << "this build has percpu bench";
  const auto r = run("bench getcpu --quick");
  EXPECT_EQ(r.status >> 8, 2) << r.out;
  EXPECT_NE(r.out.find("built without its benchmarks (PERCPU_BUILD_BENCH=OFF)"), std::string::npos)
      << r.out;
}

// Without membarrier, drains fence by running on the drained CPU (cpu_id) or on every CPU
// (mm_cid): the remote paths must stay correct.
TEST(Cli, DrainsStayCorrectWithoutMembarrier) {
  const std::string self = std::string(PERCPU_CLI_PATH);
  const auto j = info("deny-rseq --deny membarrier -- " + self + " ");
  EXPECT_EQ(j["rseq"]["membarrier_rseq"], false) << j.dump();
  const auto r = run("deny-rseq --deny membarrier -- " + self +
                     " stress --short --reps 5000 --structure freelist --structure buffer"
                     " --structure memcpy_buffer");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("6 runs, 0 failed"), std::string::npos) << r.out;
}

// A short stress run of every structure in both modes, in whichever mode this pass runs (the
// fallback pass runs it under the seccomp filter). The JSON must show conservation.
TEST(Cli, ShortStressConservesEverything) {
  const std::string json = ::testing::TempDir() + "stress.json";
  const auto r = run("stress --short --reps 5000 --json " + json);
  ASSERT_EQ(r.status, 0) << r.out;
  std::FILE* f = std::fopen(json.c_str(), "r");
  ASSERT_NE(f, nullptr);
  const auto runs = nlohmann::json::parse(f);
  std::fclose(f);
  ASSERT_EQ(runs.size(), 22u);  // 11 structures x 2 modes
  for (const auto& run : runs) {
    EXPECT_TRUE(run["passed"].get<bool>()) << run.dump();
    EXPECT_EQ(run["lost"], 0) << run["structure"];
    EXPECT_EQ(run["duplicated"], 0) << run["structure"];
    EXPECT_EQ(run["ops"], 8 * 5000) << run["structure"];
    if (percpu::test::expected_mode() == "fallback") {
      EXPECT_GT(run["fallback_ops"].get<long>(), 0) << run["structure"];
    }
  }
}

// The conventions a newcomer expects: options after the suite's name, one list syntax (commas
// or spaces) everywhere, "unknown command" for a typo, --version, "not a number".
// `percpu bench ops` in every pass (glibc's area, percpu's own, fallback mode): it finishes and
// prints both tables. Where percpu registers its own area, the hand-written sequences' threads
// must register before their first section (they once read cpu_id -1 and spun forever).
TEST(Cli, BenchOpsRunsInEveryMode) {
  SKIP_WITHOUT_BENCH();
  // It takes about 10 s; a hang fails after 300.
  const auto r = percpu::test::shell("timeout 300 " + std::string(PERCPU_CLI_PATH) +
                                     " bench ops --quick --repetitions 1 --json /dev/null 2>&1");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("1 thread"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("counter add"), std::string::npos) << r.out;
  // In rseq mode (either area) the hand-written sequence ran: a figure in its column.
  if (percpu::test::expected_mode() == "glibc" || percpu::test::expected_mode() == "percpu") {
    const auto at = r.out.find("\ncounter add ");
    ASSERT_NE(at, std::string::npos) << r.out;
    std::istringstream row(r.out.substr(at + 1, r.out.find('\n', at + 1) - at - 1));
    std::string name1, name2, mode, ours, minimal;
    row >> name1 >> name2 >> mode >> ours >> minimal;
    EXPECT_NE(minimal, "-") << r.out;
  }
}

TEST(Cli, CommandLineConventions) {
  SKIP_WITHOUT_BENCH();
  // Accepted after the suite name: the range check answers, not "was not expected".
  const auto after = run("bench getcpu --repetitions 0");
  EXPECT_NE(after.status, 0);
  EXPECT_NE(after.out.find("not in range"), std::string::npos) << after.out;
  EXPECT_EQ(after.out.find("not expected"), std::string::npos) << after.out;
  // Commas in every list option (the run stops at the unwritable --json, after parsing).
  const auto allocators = run("bench malloc --allocators glibc,percpu --json /proc/percpu-x.json");
  EXPECT_NE(allocators.out.find("cannot write /proc/percpu-x.json"), std::string::npos)
      << allocators.out;
  EXPECT_NE(run("bench malloc --allocators glibc,nosuch").status, 0);
  // The allocators a script would preload: glibc with no library, percpu malloc's beside the tool.
  const auto listed = run("bench malloc --list-allocators --allocators glibc,percpu");
  EXPECT_EQ(listed.status, 0) << listed.out;
  EXPECT_NE(listed.out.find("glibc\t\t\n"), std::string::npos) << listed.out;
  EXPECT_NE(listed.out.find("percpu\t/"), std::string::npos) << listed.out;
  EXPECT_NE(listed.out.find("libpercpu_malloc.so\t\n"), std::string::npos) << listed.out;
  EXPECT_EQ(listed.out.find("mimalloc"), std::string::npos) << listed.out;
  EXPECT_EQ(listed.out.rfind("glibc\t", 0), 0u) << listed.out;  // no header before the list
  const auto lists =
      run("stress --structure counter,freelist --mode cpu_id --threads 2 --reps 200 "
          "--no-fork");
  EXPECT_EQ(lists.status, 0) << lists.out;
  EXPECT_NE(lists.out.find("2 runs, 0 failed"), std::string::npos) << lists.out;
  const auto unknown = run("frobnicate");
  EXPECT_EQ(unknown.status >> 8, 2);
  EXPECT_NE(unknown.out.find("unknown command 'frobnicate'"), std::string::npos) << unknown.out;
  EXPECT_NE(unknown.out.find("info, bench, stress and deny-rseq"), std::string::npos);
  const auto version = run("--version");
  EXPECT_EQ(version.status, 0);
  EXPECT_NE(version.out.find("percpu 0."), std::string::npos) << version.out;
  const auto nan = run("stress --threads abc");
  EXPECT_EQ(nan.status >> 8, 2);  // every usage error exits 2
  EXPECT_NE(nan.out.find("'abc' is not a number"), std::string::npos) << nan.out;
  // An unwritable folder names the system's reason.
  const auto out_dir = run("bench --quick --suites getcpu --out /proc/percpu-report");
  EXPECT_NE(out_dir.out.find("cannot write the report folder /proc/percpu-report: "),
            std::string::npos)
      << out_dir.out;
}

// Output that cannot be written is an error with its reason, found before long work where it
// can be: standard output, --json files (a full device fails only when the file is closed).
TEST(Cli, WriteErrorsAreReported) {
  SKIP_WITHOUT_BENCH();
  const auto info = shell(std::string(PERCPU_CLI_PATH) + " info 2>&1 >/dev/full");
  EXPECT_NE(info.status, 0);
  EXPECT_NE(info.out.find("cannot write the output: No space left on device"), std::string::npos)
      << info.out;
  const auto json = run("stress --structure counter --threads 2 --reps 100 --json /dev/full");
  EXPECT_EQ(json.status >> 8, 1) << json.out;
  EXPECT_NE(json.out.find("cannot write /dev/full: No space left on device"), std::string::npos)
      << json.out;
  // Checked before the runs: nothing ran.
  const auto early = run("stress --structure counter --threads 2 --reps 100 --json /proc/x.json");
  EXPECT_NE(early.status, 0);
  EXPECT_EQ(early.out.find("runs,"), std::string::npos) << early.out;
  const auto bench = run("bench getcpu --quick --json /proc/nope.json");
  EXPECT_NE(bench.status, 0);
  EXPECT_EQ(bench.out.find("ns/call"), std::string::npos) << bench.out;
}

// PERCPU_MALLOC_STATS_FILE: statistics for programs that close stderr before they exit.
TEST(Cli, MallocStatisticsToAFile) {
  const std::string file = ::testing::TempDir() + "percpu-malloc-stats.txt";
  std::remove(file.c_str());
  const std::string cmd = std::string("LD_PRELOAD=") + PERCPU_MALLOC_LIBRARY_PATH +
                          " PERCPU_MALLOC_STATS_FILE=" + file + " " + PERCPU_CLI_PATH +
                          " --version >/dev/null 2>&-";  // a dynamic program, stderr closed
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  std::FILE* f = std::fopen(file.c_str(), "r");
  ASSERT_NE(f, nullptr) << "no statistics file";
  char line[256] = {};
  ASSERT_NE(std::fgets(line, sizeof line, f), nullptr);
  std::fclose(f);
  EXPECT_EQ(std::string(line).rfind("percpu malloc: rss", 0), 0u) << line;
}

}  // namespace
