#include <gtest/gtest.h>

#include <percpu/freelist.h>
#include <atomic>
#include <memory>
#include <set>
#include <thread>
#include <vector>

#include "modes.h"
#include "pin.h"

namespace {

struct item {
  item* next = nullptr;
  int id = 0;
  std::atomic<int> owners{0};  // how many threads believe they hold it (must stay 0 or 1)
};

template <class T>
class Freelist : public ::testing::Test {};
TYPED_TEST_SUITE(Freelist, percpu::test::Modes);

template <percpu::index_mode M, bool Checked = percpu::kCheckedDefault>
using list_of = percpu::freelist<item, &item::next, M, Checked>;

template <class List>
std::size_t count_all(const List& list) {
  std::size_t n = 0;
  for (int i = 0; i < list.slots(); ++i) n += list.count_quiescent(i);
  return n;
}

TYPED_TEST(Freelist, PushPopIsLastInFirstOut) {
  percpu::test::pinned pin(0);
  list_of<TypeParam::value> list;
  item a, b, c;
  EXPECT_EQ(list.pop(), nullptr);
  list.push(&a);
  list.push(&b);
  list.push(&c);
  EXPECT_EQ(list.pop(), &c);
  EXPECT_EQ(list.pop(), &b);
  EXPECT_EQ(list.pop(), &a);
  EXPECT_EQ(list.pop(), nullptr);
  EXPECT_EQ(list.slots(), percpu::index_space<TypeParam::value>());
}

TYPED_TEST(Freelist, PopAllDetachesTheWholeChain) {
  percpu::test::pinned pin(0);
  list_of<TypeParam::value> list;
  item items[5];
  for (auto& it : items) list.push(&it);
  std::set<item*> seen;
  for (item* p = list.pop_all(); p; p = p->next) seen.insert(p);
  EXPECT_EQ(seen.size(), 5u);
  EXPECT_EQ(list.pop(), nullptr);
  EXPECT_EQ(list.pop_all(), nullptr);
}

TYPED_TEST(Freelist, BadInputIsRejectedAndLosesNothing) {
  percpu::test::pinned pin(0);
  list_of<TypeParam::value, true> list;  // checked, as in debug builds
  item a, b;
  list.push(&a);
  list.push(&b);
  EXPECT_THROW(list.push(nullptr), std::invalid_argument);
  EXPECT_THROW(list.push(&a), std::logic_error);  // already in the list
  EXPECT_THROW(list.push(&b), std::logic_error);
  EXPECT_THROW(list.drain(-1), std::out_of_range);
  EXPECT_THROW(list.drain(list.slots()), std::out_of_range);
  EXPECT_EQ(count_all(list), 2u);
  EXPECT_EQ(list.pop(), &b);
  EXPECT_EQ(list.pop(), &a);
  list.push(&a);  // popped items may be pushed again
  EXPECT_EQ(list.pop(), &a);
}

TYPED_TEST(Freelist, DrainTakesAnotherIndexsList) {
  list_of<TypeParam::value> list;
  item items[4];
  int index = -1;
  {
    percpu::test::pinned pin(0);
    for (auto& it : items) list.push(&it);
    index = percpu::current_index<TypeParam::value>();
  }
  std::size_t drained = 0;
  std::thread other([&] {
    percpu::test::pinned pin(static_cast<int>(percpu::machine_topology().allowed_cpus.back()));
    for (item* p = list.drain(index); p; p = p->next) ++drained;
  });
  other.join();
  EXPECT_EQ(drained, 4u);
  EXPECT_EQ(count_all(list), 0u);
}

// Workers pop an item, check nobody else holds it, and push it back; a drainer keeps draining
// every index and pushing what it took onto its own list. Every item must end in exactly one
// list, never held twice.
TYPED_TEST(Freelist, ConcurrentPushPopAndDrainConserveItems) {
  constexpr int kItems = 64, kThreads = 6;
  list_of<TypeParam::value> list;
  std::vector<item> items(kItems);
  for (int i = 0; i < kItems; ++i) {
    items[i].id = i;
    list.push(&items[i]);
  }
  std::atomic<bool> stop{false};
  std::atomic<long> doubles{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < kThreads; ++t)
    pool.emplace_back([&] {
      for (int i = 0; i < 100000; ++i) {
        item* p = list.pop();
        if (!p) continue;
        if (p->owners.fetch_add(1) != 0) doubles.fetch_add(1);
        p->owners.fetch_sub(1);
        list.push(p);
      }
    });
  std::thread drainer([&] {
    while (!stop.load()) {
      for (int i = 0; i < list.slots(); ++i) {
        item* chain = list.drain(i);
        while (chain) {
          item* next = chain->next;
          list.push(chain);
          chain = next;
        }
      }
    }
  });
  for (auto& th : pool) th.join();
  stop = true;
  drainer.join();
  EXPECT_EQ(doubles.load(), 0);
  std::set<item*> seen;
  for (int i = 0; i < list.slots(); ++i)
    for (item* p = list.drain(i); p; p = p->next) EXPECT_TRUE(seen.insert(p).second);
  EXPECT_EQ(seen.size(), static_cast<std::size_t>(kItems));
}

}  // namespace
