// The report's own arithmetic and file reading: the A/B statistics behind the context-switch
// verdict, and the ELF sizes behind its "cost in size" table.
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "common/ab_stats.h"
#include "common/elf_footprint.h"

namespace {

using percpu::cli::ab_verdict;
using percpu::cli::compare_means;
using percpu::cli::describe_samples;

TEST(AbStats, MeanAndSampleStandardDeviation) {
  const auto m = describe_samples({2, 4, 4, 4, 5, 5, 7, 9});
  EXPECT_DOUBLE_EQ(m.mean, 5);
  EXPECT_NEAR(m.sd, 2.138, 1e-3);  // sample (n - 1) standard deviation
  EXPECT_EQ(m.n, 8u);
  EXPECT_EQ(describe_samples({3}).sd, 0);
  EXPECT_EQ(describe_samples({}).n, 0u);
}

TEST(AbStats, TQuantilesFollowTheTable) {
  EXPECT_NEAR(percpu::cli::t_quantile_975(4), 2.776, 1e-3);
  EXPECT_NEAR(percpu::cli::t_quantile_975(4.7), 2.776, 1e-3);  // rounds down: wider band
  EXPECT_NEAR(percpu::cli::t_quantile_975(1e6), 1.96, 1e-3);
}

TEST(AbStats, EqualSamplesAreWithinTheNoise) {
  const auto a = describe_samples({1.00, 1.05, 0.95, 1.02, 0.98});
  const auto d = compare_means(a, a);
  EXPECT_DOUBLE_EQ(d.percent, 0);
  EXPECT_GT(d.noise_percent, 0);
  EXPECT_TRUE(d.within_noise());
  EXPECT_EQ(d.verdict(), "within the noise");
}

TEST(AbStats, AClearDifferenceStandsOut) {
  const auto a = describe_samples({1.00, 1.01, 0.99, 1.00, 1.01, 0.99});
  const auto b = describe_samples({1.20, 1.21, 1.19, 1.20, 1.21, 1.19});
  const auto d = compare_means(a, b);
  EXPECT_NEAR(d.percent, 20, 1e-9);
  EXPECT_LT(d.noise_percent, 2);
  EXPECT_EQ(d.verdict(), "slower (beyond the noise)");
  EXPECT_EQ(compare_means(b, a).verdict(), "faster (beyond the noise)");
}

TEST(AbStats, TooFewRunsCannotTell) {
  const auto d = compare_means(describe_samples({1, 1.1}), describe_samples({2, 2.1}));
  EXPECT_FALSE(d.enough_runs);
  EXPECT_EQ(d.verdict(), "too few runs to tell");
}

TEST(AbStats, VerdictWeighsChanceAndDirection) {
  percpu::cli::ab_difference within, slower, faster;
  within.enough_runs = slower.enough_runs = faster.enough_runs = true;
  within.percent = 1, within.noise_percent = 2;
  slower.percent = 5, slower.noise_percent = 2;
  faster.percent = -5, faster.noise_percent = 2;

  ab_verdict none;
  for (int i = 0; i < 12; ++i) none.add(within);
  EXPECT_NE(none.text().find("within the noise"), std::string::npos);
  EXPECT_FALSE(none.measurable_cost());

  ab_verdict chance = none;
  chance.add(slower);  // 1 of 13: what chance gives
  EXPECT_NE(chance.text().find("no measurable cost"), std::string::npos);
  EXPECT_FALSE(chance.measurable_cost());

  ab_verdict mixed = chance;
  mixed.add(slower);
  mixed.add(faster);
  EXPECT_NE(mixed.text().find("both directions"), std::string::npos);
  EXPECT_FALSE(mixed.measurable_cost());

  ab_verdict cost = chance;
  cost.add(slower);
  cost.add(slower);
  EXPECT_TRUE(cost.measurable_cost());
  EXPECT_NE(cost.text().find("measurable cost on this machine"), std::string::npos);
}

TEST(ElfFootprint, ReadsCodeAndThreadLocalSizesOfLibpercpu) {
  std::string why;
  const auto f = percpu::cli::read_elf_footprint(PERCPU_SHARED_LIBRARY_PATH, &why);
  ASSERT_TRUE(f.has_value()) << why;
  EXPECT_GT(f->text_bytes, 1000u);
  EXPECT_GE(f->code_bytes, f->text_bytes);
  EXPECT_GT(f->tls_bytes, 0u);  // percpu's own rseq area and thread state
  EXPECT_GT(f->file_bytes, f->code_bytes);
}

TEST(ElfFootprint, RefusesWhatIsNotAnElfFile) {
  const std::string text = testing::TempDir() + "/not_elf.txt";
  std::ofstream(text) << "hello\n";
  std::string why;
  EXPECT_FALSE(percpu::cli::read_elf_footprint(text, &why).has_value());
  EXPECT_NE(why.find("not a little-endian ELF64"), std::string::npos) << why;
  EXPECT_FALSE(percpu::cli::read_elf_footprint("/nonexistent/lib.so", &why).has_value());
  EXPECT_NE(why.find("cannot open"), std::string::npos);

  // The ELF header of a real library with nothing after it: headers point past the end.
  std::ifstream in(PERCPU_SHARED_LIBRARY_PATH, std::ios::binary);
  std::vector<char> head(64);
  in.read(head.data(), 64);
  const std::string cut = testing::TempDir() + "/truncated.so";
  std::ofstream(cut, std::ios::binary).write(head.data(), 64);
  EXPECT_FALSE(percpu::cli::read_elf_footprint(cut, &why).has_value());
  EXPECT_NE(why.find("out of the file"), std::string::npos) << why;
}

}  // namespace
