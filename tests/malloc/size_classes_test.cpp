// percpu malloc's size classes: every size maps to the smallest class that holds it, classes are
// aligned and increasing, spans waste at most an eighth of their bytes, and free's object-start
// check holds exactly at the multiples of the size.
#include <gtest/gtest.h>

#include "malloc/central.h"
#include "malloc/size_classes.h"

namespace {

using namespace percpu::malloc_impl;

TEST(MallocSizeClasses, ClassesAreAlignedIncreasingAndSpansWasteLittle) {
  ASSERT_GT(kClassCount, 40u);
  EXPECT_EQ(kClasses[0].size, 0u);
  for (std::size_t c = 1; c < kClassCount; ++c) {
    const size_class_info& k = kClasses[c];
    EXPECT_EQ(k.size % kAlignment, 0u) << c;
    if (c > 1) {
      EXPECT_GT(k.size, kClasses[c - 1].size) << c;
    }
    EXPECT_GE(k.objects_per_span(), 1u) << c;
    const std::size_t span = std::size_t{k.pages} * kPageSize;
    EXPECT_LE(span % k.size, span / 8) << "class " << c << " size " << k.size;
    EXPECT_GE(k.batch, 2u);
    EXPECT_LE(k.batch, kMaxBatch);  // what the transfer cache and the refills hold
  }
  EXPECT_EQ(kClasses[kClassCount - 1].size, kMaxSmallSize);
}

TEST(MallocSizeClasses, EverySizeGetsTheSmallestClassThatHoldsIt) {
  for (std::size_t size = 0; size <= kMaxSmallSize; ++size) {
    const std::size_t c = size_class_of(size);
    ASSERT_GE(c, 1u) << size;
    ASSERT_GE(kClasses[c].size, size) << size;
    if (c > 1) {
      ASSERT_LT(kClasses[c - 1].size, size) << size;
    }
  }
  EXPECT_EQ(size_class_of(kMaxSmallSize + 1), 0u);
  EXPECT_EQ(size_class_of(SIZE_MAX), 0u);
}

// free's interior-pointer check: exactly the offsets that are multiples of the class's size and
// start a whole object inside the span, at every byte of every class's span and a span's worth
// beyond (the tail after the last object and pointers past the span are no objects).
TEST(MallocSizeClasses, ObjectStartsAreExactlyTheMultiplesOfTheSize) {
  for (std::size_t c = 1; c < kClassCount; ++c) {
    const std::uint64_t size = kClasses[c].size;
    const std::uint64_t span = std::uint64_t{kClasses[c].pages} * kPageSize;
    std::uint64_t wrong = 0;
    for (std::uint64_t off = 0; off < 2 * span; ++off)
      if (is_object_start(c, off) != (off % size == 0 && off + size <= span)) ++wrong;
    EXPECT_EQ(wrong, 0u) << "class " << c << " size " << size;
  }
}

}  // namespace
