// The rule that decides which rseq fields are usable, for every __rseq_size glibc has exported
// against every feature size kernels report.
#include <gtest/gtest.h>

#include <percpu/abi.h>

namespace {

using percpu::abi::decide_usable_fields;
using percpu::abi::glibc_area_extent;
using percpu::abi::usable_fields;

struct row {
  unsigned rseq_size;          // glibc's __rseq_size
  unsigned long feature_size;  // getauxval(AT_RSEQ_FEATURE_SIZE)
  bool node_id;
  bool mm_cid;
};

// rseq_size 0: glibc registered nothing, so nothing of its area is usable. Sizes 20/28/32/33
// all mean glibc registered at least 32 bytes. Feature size 0 or 20: a kernel that fills only
// the original fields. 28 and 33: kernels with node_id and mm_cid.
constexpr row kTable[] = {
    {0, 0, false, false},  {0, 20, false, false},  {0, 28, false, false}, {0, 33, false, false},
    {20, 0, false, false}, {20, 20, false, false}, {20, 28, true, true},  {20, 33, true, true},
    {28, 0, false, false}, {28, 20, false, false}, {28, 28, true, true},  {28, 33, true, true},
    {32, 0, false, false}, {32, 20, false, false}, {32, 28, true, true},  {32, 33, true, true},
    {33, 0, false, false}, {33, 20, false, false}, {33, 28, true, true},  {33, 33, true, true},
};

TEST(UsableFields, TableOfGlibcSizesAndKernelFeatureSizes) {
  for (const row& r : kTable) {
    const usable_fields got = decide_usable_fields(glibc_area_extent(r.rseq_size), r.feature_size);
    EXPECT_EQ(got.node_id, r.node_id)
        << "__rseq_size " << r.rseq_size << " feature " << r.feature_size;
    EXPECT_EQ(got.mm_cid, r.mm_cid)
        << "__rseq_size " << r.rseq_size << " feature " << r.feature_size;
  }
}

TEST(UsableFields, OurMachinesGlibc20Kernel28) {
  const usable_fields got = decide_usable_fields(glibc_area_extent(20), 28);
  EXPECT_TRUE(got.node_id);
  EXPECT_TRUE(got.mm_cid);
}

TEST(UsableFields, AreaShorterThanKernelFills) {
  // A registered area that ends inside mm_cid: node_id fits, mm_cid does not.
  const usable_fields got = decide_usable_fields(26, 33);
  EXPECT_TRUE(got.node_id);
  EXPECT_FALSE(got.mm_cid);
}

TEST(GlibcAreaExtent, MeaningsOfRseqSize) {
  EXPECT_EQ(glibc_area_extent(0), 0u);
  EXPECT_EQ(glibc_area_extent(20), 32u);
  EXPECT_EQ(glibc_area_extent(32), 32u);
  EXPECT_EQ(glibc_area_extent(33), 33u);
}

}  // namespace
