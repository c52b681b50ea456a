#include <gtest/gtest.h>

#include <percpu/buffer.h>
#include <percpu/memcpy_buffer.h>
#include <atomic>
#include <set>
#include <thread>
#include <vector>

#include "modes.h"
#include "pin.h"

namespace {

template <class T>
class Buffer : public ::testing::Test {};
TYPED_TEST_SUITE(Buffer, percpu::test::Modes);

template <class T>
class MemcpyBuffer : public ::testing::Test {};
TYPED_TEST_SUITE(MemcpyBuffer, percpu::test::Modes);

struct record {
  std::uint64_t id;
  std::uint64_t check;  // ~id: a torn copy shows up as a mismatch
  char tail[5];         // 21 bytes: exercises the 0-7 byte tail of the copy
};

record make_record(std::uint64_t id) {
  record r{id, ~id, {}};
  for (int i = 0; i < 5; ++i) r.tail[i] = static_cast<char>(id + i);
  return r;
}

bool intact(const record& r) {
  for (int i = 0; i < 5; ++i)
    if (r.tail[i] != static_cast<char>(r.id + i)) return false;
  return r.check == ~r.id;
}

TYPED_TEST(Buffer, PushPopReportsFullAndEmpty) {
  percpu::test::pinned pin(0);
  percpu::buffer<int*, TypeParam::value> buf(3);
  int v[4];
  EXPECT_EQ(buf.pop(), nullptr);
  EXPECT_TRUE(buf.push(&v[0]));
  EXPECT_TRUE(buf.push(&v[1]));
  EXPECT_TRUE(buf.push(&v[2]));
  EXPECT_FALSE(buf.push(&v[3]));  // full: reported, nothing stored
  const int index = percpu::current_index<TypeParam::value>();
  EXPECT_EQ(buf.size(index), 3u);
  EXPECT_EQ(buf.pop(), &v[2]);
  EXPECT_EQ(buf.pop(), &v[1]);
  EXPECT_EQ(buf.pop(), &v[0]);
  EXPECT_EQ(buf.pop(), nullptr);
  EXPECT_EQ(buf.capacity(), 3u);
}

TYPED_TEST(Buffer, BadInputIsRejectedAndLosesNothing) {
  EXPECT_THROW((percpu::buffer<int*, TypeParam::value>(0)), std::invalid_argument);
  EXPECT_THROW((percpu::buffer<int*, TypeParam::value>(std::size_t{1} << 40)),
               std::invalid_argument);
  percpu::test::pinned pin(0);
  percpu::buffer<int*, TypeParam::value, true> buf(4);  // checked, as in debug builds
  int a, b;
  EXPECT_TRUE(buf.push(&a));
  EXPECT_THROW(buf.push(nullptr), std::invalid_argument);
  EXPECT_THROW(buf.push(&a), std::logic_error);
  EXPECT_THROW(buf.size(-1), std::out_of_range);
  EXPECT_THROW(buf.drain(buf.slots()), std::out_of_range);
  EXPECT_TRUE(buf.push(&b));
  EXPECT_EQ(buf.pop(), &b);
  EXPECT_EQ(buf.pop(), &a);
  EXPECT_EQ(buf.pop(), nullptr);
}

TYPED_TEST(Buffer, DrainReturnsOldestFirst) {
  percpu::buffer<int*, TypeParam::value> buf(8);
  int v[3];
  int index;
  {
    percpu::test::pinned pin(0);
    for (auto& x : v) ASSERT_TRUE(buf.push(&x));
    index = percpu::current_index<TypeParam::value>();
  }
  const auto got = buf.drain(index);
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0], &v[0]);
  EXPECT_EQ(got[2], &v[2]);
  EXPECT_EQ(buf.size(index), 0u);
}

// Pointers circulate between the buffers and the threads while a drainer empties indices and
// pushes back what it took: at the end every pointer is stored exactly once.
TYPED_TEST(Buffer, ConcurrentPushPopAndDrainConservePointers) {
  constexpr int kItems = 256, kThreads = 6;
  percpu::buffer<std::atomic<int>*, TypeParam::value> buf(kItems);
  std::vector<std::atomic<int>> owners(kItems);
  for (auto& o : owners) ASSERT_TRUE(buf.push(&o));
  std::atomic<bool> stop{false};
  std::atomic<long> doubles{0}, overflow{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < kThreads; ++t)
    pool.emplace_back([&] {
      for (int i = 0; i < 100000; ++i) {
        auto* p = buf.pop();
        if (!p) continue;
        if (p->fetch_add(1) != 0) doubles.fetch_add(1);
        p->fetch_sub(1);
        if (!buf.push(p)) overflow.fetch_add(1);
      }
    });
  std::thread drainer([&] {
    while (!stop.load())
      for (int i = 0; i < buf.slots(); ++i)
        for (auto* p : buf.drain(i))
          if (!buf.push(p)) overflow.fetch_add(1);
  });
  for (auto& th : pool) th.join();
  stop = true;
  drainer.join();
  EXPECT_EQ(doubles.load(), 0);
  EXPECT_EQ(overflow.load(), 0);  // capacity covers every item on one index
  std::set<std::atomic<int>*> seen;
  for (int i = 0; i < buf.slots(); ++i)
    for (auto* p : buf.drain(i)) EXPECT_TRUE(seen.insert(p).second);
  EXPECT_EQ(seen.size(), static_cast<std::size_t>(kItems));
}

TYPED_TEST(MemcpyBuffer, CopiesRecordsInAndOut) {
  percpu::test::pinned pin(0);
  percpu::memcpy_buffer<record, TypeParam::value> buf(2);
  static_assert(decltype(buf)::kRecordStride == 24);
  record out{};
  EXPECT_FALSE(buf.pop(out));
  EXPECT_TRUE(buf.push(make_record(1)));
  EXPECT_TRUE(buf.push(make_record(2)));
  EXPECT_FALSE(buf.push(make_record(3)));  // full
  ASSERT_TRUE(buf.pop(out));
  EXPECT_EQ(out.id, 2u);
  EXPECT_TRUE(intact(out));
  auto last = buf.pop();
  ASSERT_TRUE(last.has_value());
  EXPECT_EQ(last->id, 1u);
  EXPECT_TRUE(intact(*last));
  EXPECT_FALSE(buf.pop().has_value());
  EXPECT_THROW((percpu::memcpy_buffer<record, TypeParam::value>(0)), std::invalid_argument);
  EXPECT_THROW(buf.drain(-1), std::out_of_range);
}

// Records are popped, checked for tearing, and pushed back by many threads while a drainer
// empties indices: every id survives exactly once and intact.
TYPED_TEST(MemcpyBuffer, ConcurrentCopiesConserveRecords) {
  constexpr int kRecords = 128, kThreads = 6;
  percpu::memcpy_buffer<record, TypeParam::value> buf(kRecords);
  for (int i = 0; i < kRecords; ++i) ASSERT_TRUE(buf.push(make_record(i)));
  std::atomic<bool> stop{false};
  std::atomic<long> torn{0}, overflow{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < kThreads; ++t)
    pool.emplace_back([&] {
      record r;
      for (int i = 0; i < 100000; ++i) {
        if (!buf.pop(r)) continue;
        if (!intact(r)) torn.fetch_add(1);
        if (!buf.push(r)) overflow.fetch_add(1);
      }
    });
  std::thread drainer([&] {
    while (!stop.load())
      for (int i = 0; i < buf.slots(); ++i)
        for (const record& r : buf.drain(i))
          if (!buf.push(r)) overflow.fetch_add(1);
  });
  for (auto& th : pool) th.join();
  stop = true;
  drainer.join();
  EXPECT_EQ(torn.load(), 0);
  EXPECT_EQ(overflow.load(), 0);
  std::set<std::uint64_t> ids;
  for (int i = 0; i < buf.slots(); ++i)
    for (const record& r : buf.drain(i)) {
      EXPECT_TRUE(intact(r));
      EXPECT_TRUE(ids.insert(r.id).second);
    }
  EXPECT_EQ(ids.size(), static_cast<std::size_t>(kRecords));
}

}  // namespace
