// Each per-CPU operation, one thread: the right result on the right slot, and the right status
// when the index is wrong or a compare fails. Typed over both index modes.
#include <gtest/gtest.h>

#include <percpu/percpu.h>
#include <array>
#include <cstring>
#include <vector>

#include "modes.h"
#include "pin.h"
#include "slots.h"

namespace {

using percpu::index_mode;
using percpu::status;

template <class T>
class Ops : public ::testing::Test {};
TYPED_TEST_SUITE(Ops, percpu::test::Modes);

TYPED_TEST(Ops, AddCommitsOnTheCurrentSlot) {
  constexpr index_mode M = TypeParam::value;
  for (int cpu : percpu::machine_topology().allowed_cpus) {
    percpu::test::pinned pin(cpu);
    auto slots = percpu::test::make_slots();
    int used = -1;
    EXPECT_EQ(percpu::retry<M>([&](int index) {
                used = index;
                return percpu::add<M>(&slots[index].value, 5, index);
              }),
              status::committed);
    EXPECT_EQ(slots[used].value, 5);
    EXPECT_EQ(percpu::test::sum(slots), 5);
    if (M == index_mode::cpu_id) {
      EXPECT_EQ(used, cpu);
    }
  }
}

TYPED_TEST(Ops, WrongIndexNeverCommitsInRseqMode) {
  constexpr index_mode M = TypeParam::value;
  if (!percpu::rseq_active()) GTEST_SKIP() << "fallback mode does not check the index";
  auto slots = percpu::test::make_slots();
  std::intptr_t out = 0;
  for (int attempt = 0; attempt < 100; ++attempt) {
    const int wrong = percpu::machine_topology().cpu_id_bound + 7;  // never current
    EXPECT_EQ(percpu::add<M>(&slots[0].value, 1, wrong), status::index_changed);
    EXPECT_EQ(percpu::compare_store<M>(&slots[0].value, 0, 9, wrong), status::index_changed);
    EXPECT_EQ(percpu::pop<M>(&slots[0].value, 0, 0, &out, wrong), status::index_changed);
  }
  EXPECT_EQ(percpu::test::sum(slots), 0);
}

TYPED_TEST(Ops, CompareStore) {
  constexpr index_mode M = TypeParam::value;
  auto slots = percpu::test::make_slots();
  int used = -1;
  auto cas = [&](std::intptr_t expect, std::intptr_t newv) {
    return percpu::retry<M>([&](int index) {
      used = index;
      return percpu::compare_store<M>(&slots[index].value, expect, newv, index);
    });
  };
  EXPECT_EQ(cas(0, 42), status::committed);
  EXPECT_EQ(slots[used].value, 42);
  EXPECT_EQ(cas(0, 43), status::compare_failed);
  EXPECT_EQ(percpu::test::sum(slots), 42);
}

TYPED_TEST(Ops, CompareCompareStore) {
  constexpr index_mode M = TypeParam::value;
  auto slots = percpu::test::make_slots();
  auto ccas = [&](std::intptr_t expect, std::intptr_t expect2, std::intptr_t newv) {
    return percpu::retry<M>([&](int index) {
      return percpu::compare_compare_store<M>(&slots[index].value, expect, &slots[index].extra,
                                              expect2, newv, index);
    });
  };
  EXPECT_EQ(ccas(0, 1, 5), status::compare_failed);  // extra is 0, not 1
  EXPECT_EQ(ccas(1, 0, 5), status::compare_failed);  // value is 0, not 1
  EXPECT_EQ(ccas(0, 0, 5), status::committed);
  EXPECT_EQ(percpu::test::sum(slots), 5);
}

struct node {
  node* next = nullptr;
  int id = 0;
};

TYPED_TEST(Ops, PopTakesTheHeadAndStopsWhenEmpty) {
  constexpr index_mode M = TypeParam::value;
  auto heads = percpu::test::make_slots();
  // Build one list per slot: 2 -> 1 -> 0 (so every slot has the same content).
  std::vector<std::vector<node>> lists(heads.size(), std::vector<node>(3));
  for (size_t s = 0; s < heads.size(); ++s) {
    for (int i = 0; i < 3; ++i) lists[s][i].id = i;
    lists[s][1].next = &lists[s][0];
    lists[s][2].next = &lists[s][1];
    heads[s].value = reinterpret_cast<std::intptr_t>(&lists[s][2]);
  }
  std::vector<int> popped;
  for (;;) {
    std::intptr_t out = 0;
    const status st = percpu::retry<M>([&](int index) {
      return percpu::pop<M>(&heads[index].value, 0, offsetof(node, next), &out, index);
    });
    if (st == status::compare_failed) break;
    ASSERT_EQ(st, status::committed);
    popped.push_back(reinterpret_cast<node*>(out)->id);
    ASSERT_LE(popped.size(), 3 * heads.size());
  }
  // The thread may migrate between pops, but each slot's list pops 2, 1, 0 in order and the
  // loop ends when the current slot is empty.
  ASSERT_GE(popped.size(), 3u);
  EXPECT_EQ(popped[0], 2);
}

// A pop whose item the caller drops still pops: the section must not be optimized away with its
// unused result (GCC 12 deleted such an asm goto before the sections were marked volatile).
TYPED_TEST(Ops, APopWhoseItemIsIgnoredStillPops) {
  constexpr index_mode M = TypeParam::value;
  percpu::test::pinned pin(0);
  auto heads = percpu::test::make_slots();
  std::vector<node> items(heads.size());
  for (size_t s = 0; s < heads.size(); ++s)
    heads[s].value = reinterpret_cast<std::intptr_t>(&items[s]);
  const status st = percpu::retry<M>([&](int index) {
    std::intptr_t ignored;
    return percpu::pop<M>(&heads[index].value, 0, offsetof(node, next), &ignored, index);
  });
  EXPECT_EQ(st, status::committed);
  EXPECT_EQ(heads[percpu::current_index<M>()].value, 0);
}

// compare_pop pops only while the second word holds the expected value (a drain's gate).
TYPED_TEST(Ops, ComparePopRespectsTheGate) {
  constexpr index_mode M = TypeParam::value;
  percpu::test::pinned pin(0);
  auto heads = percpu::test::make_slots();
  auto gates = percpu::test::make_slots();
  std::vector<std::vector<node>> lists(heads.size(), std::vector<node>(2));
  for (size_t s = 0; s < heads.size(); ++s) {
    lists[s][1].next = &lists[s][0];
    heads[s].value = reinterpret_cast<std::intptr_t>(&lists[s][1]);
    gates[s].value = 1;  // closed
  }
  auto attempt = [&](std::intptr_t& out) {
    return percpu::retry<M>([&](int index) {
      return percpu::compare_pop<M>(&heads[index].value, 0, &gates[index].value, 0,
                                    offsetof(node, next), &out, index);
    });
  };
  std::intptr_t out = 0;
  EXPECT_EQ(attempt(out), status::compare_failed);  // gate closed: nothing popped
  const int index = percpu::current_index<M>();
  EXPECT_EQ(heads[index].value, reinterpret_cast<std::intptr_t>(&lists[index][1]));
  gates[index].value = 0;  // open
  EXPECT_EQ(attempt(out), status::committed);
  EXPECT_EQ(out, reinterpret_cast<std::intptr_t>(&lists[index][1]));
  EXPECT_EQ(attempt(out), status::committed);
  EXPECT_EQ(out, reinterpret_cast<std::intptr_t>(&lists[index][0]));
  EXPECT_EQ(attempt(out), status::compare_failed);  // empty
  EXPECT_EQ(heads[index].value, 0);
}

// compare_push links the item to the head it reads and pushes it, only while the gate is open.
TYPED_TEST(Ops, ComparePushLinksToTheHeadAndRespectsTheGate) {
  constexpr index_mode M = TypeParam::value;
  percpu::test::pinned pin(0);
  auto heads = percpu::test::make_slots();
  auto gates = percpu::test::make_slots();
  std::vector<std::vector<node>> lists(heads.size(), std::vector<node>(2));
  for (size_t s = 0; s < heads.size(); ++s) gates[s].value = 1;  // closed
  auto push = [&](node* item) {
    return percpu::retry<M>([&](int index) {
      return percpu::compare_push<M>(&heads[index].value, &gates[index].value, 0,
                                     offsetof(node, next), reinterpret_cast<std::intptr_t>(item),
                                     index);
    });
  };
  const int index = percpu::current_index<M>();
  node* const marker = reinterpret_cast<node*>(0x1000);
  lists[index][0].next = marker;
  EXPECT_EQ(push(&lists[index][0]), status::compare_failed);  // gate closed: nothing pushed
  EXPECT_EQ(heads[index].value, 0);
  gates[index].value = 0;  // open
  EXPECT_EQ(push(&lists[index][0]), status::committed);
  EXPECT_EQ(lists[index][0].next, nullptr);  // linked to the empty head
  EXPECT_EQ(push(&lists[index][1]), status::committed);
  EXPECT_EQ(heads[index].value, reinterpret_cast<std::intptr_t>(&lists[index][1]));
  EXPECT_EQ(lists[index][1].next, &lists[index][0]);
}

// array_push stores above the count and raises it until the limit; array_pop takes the top
// back, stops at 0, and both refuse a count at or above their limit (a closed count).
TYPED_TEST(Ops, ArrayPushAndPopKeepTheCountAndStopAtTheLimit) {
  constexpr index_mode M = TypeParam::value;
  constexpr std::uintptr_t kLimit = 3;
  constexpr std::uintptr_t kPopLimit = std::uintptr_t{1} << 40;
  std::vector<std::array<std::intptr_t, 1 + kLimit + 1>> stacks(
      static_cast<std::size_t>(percpu::machine_topology().cpu_id_bound));
  for (auto& st : stacks) st.fill(-1);
  for (auto& st : stacks) st[0] = 0;
  percpu::test::pinned pin(percpu::machine_topology().allowed_cpus.front());
  ASSERT_TRUE(pin.ok());
  int used = -1;
  auto push = [&](std::intptr_t value) {
    return percpu::retry<M>([&](int index) {
      used = index;
      return percpu::array_push<M>(&stacks[index][0], kLimit, &stacks[index][1], value, index);
    });
  };
  std::intptr_t out = 0;
  auto pop = [&] {
    return percpu::retry<M>([&](int index) {
      used = index;
      return percpu::array_pop<M>(&stacks[index][0], kPopLimit, &stacks[index][1], &out, index);
    });
  };
  EXPECT_EQ(pop(), status::compare_failed);  // empty
  for (std::intptr_t v = 10; v < 13; ++v) EXPECT_EQ(push(v), status::committed);
  auto& st = stacks[static_cast<std::size_t>(used)];
  EXPECT_EQ(st[0], 3);
  EXPECT_EQ(push(13), status::compare_failed);  // full: nothing stored above the count
  EXPECT_EQ(st[4], -1);
  EXPECT_EQ(st[0], 3);
  EXPECT_EQ(pop(), status::committed);
  EXPECT_EQ(out, 12);
  EXPECT_EQ(st[0], 2);
  const std::intptr_t closed = std::intptr_t{1} << 41 | 2;  // above both limits
  st[0] = closed;
  out = 0;
  EXPECT_EQ(pop(), status::compare_failed);
  EXPECT_EQ(push(14), status::compare_failed);
  EXPECT_EQ(st[0], closed);
  EXPECT_EQ(out, 0);
  st[0] = 2;
  EXPECT_EQ(pop(), status::committed);
  EXPECT_EQ(out, 11);
  EXPECT_EQ(pop(), status::committed);
  EXPECT_EQ(out, 10);
  EXPECT_EQ(pop(), status::compare_failed);
  EXPECT_EQ(st[0], 0);
  if (percpu::rseq_active()) {  // a wrong index changes nothing
    const int wrong = percpu::machine_topology().cpu_id_bound + 7;
    EXPECT_EQ(percpu::array_push<M>(&st[0], kLimit, &st[1], 5, wrong), status::index_changed);
    EXPECT_EQ(st[0], 0);
  }
}

TYPED_TEST(Ops, CompareStoreStorePublishesBoth) {
  constexpr index_mode M = TypeParam::value;
  auto slots = percpu::test::make_slots();
  int used = -1;
  const status st = percpu::retry<M>([&](int index) {
    used = index;
    return percpu::compare_store_store<M, percpu::commit_order::release>(
        &slots[index].value, 0, &slots[index].extra, 77, 1, index);
  });
  EXPECT_EQ(st, status::committed);
  EXPECT_EQ(slots[used].value, 1);
  EXPECT_EQ(slots[used].extra, 77);
  EXPECT_EQ(percpu::retry<M>([&](int index) {
              return percpu::compare_store_store<M>(&slots[index].value, 5, &slots[index].extra, 1,
                                                    2, index);
            }),
            status::compare_failed);
}

TYPED_TEST(Ops, CompareMemcpyStoreCopiesEveryLength) {
  constexpr index_mode M = TypeParam::value;
  for (std::size_t len : {0, 1, 7, 8, 9, 15, 16, 63, 64, 100}) {
    auto slots = percpu::test::make_slots();
    std::vector<unsigned char> src(len), dst(len + 16, 0xee);
    for (std::size_t i = 0; i < len; ++i) src[i] = static_cast<unsigned char>(i * 7 + 1);
    const status st = percpu::retry<M>([&](int index) {
      return percpu::compare_memcpy_store<M>(&slots[index].value, 0, dst.data() + 8, src.data(),
                                             len, 1, index);
    });
    ASSERT_EQ(st, status::committed) << len;
    EXPECT_EQ(std::memcmp(dst.data() + 8, src.data(), len), 0) << len;
    for (int i = 0; i < 8; ++i) {  // nothing written outside [dst, dst + len)
      EXPECT_EQ(dst[i], 0xee) << len;
      EXPECT_EQ(dst[len + 8 + i], 0xee) << len;
    }
    EXPECT_EQ(percpu::test::sum(slots), 1);
  }
}

// The rseq_only policy (a structure's fast attempt): in rseq mode the same result as the
// default; outside it index_changed and nothing stored, where the default runs the fallback.
TYPED_TEST(Ops, RseqOnlyPolicyNeverRunsTheFallback) {
  constexpr index_mode M = TypeParam::value;
  using percpu::detail::rseq_only;
  auto slots = percpu::test::make_slots();
  std::intptr_t item[2] = {0, 0};  // a list item: next pointer at offset 0
  int committed = 0;
  for (int attempt = 0; attempt < 1000 && committed < 10; ++attempt) {
    const int index = percpu::current_index<M>();
    const status s = percpu::add<M, rseq_only>(&slots[index].value, 1, index);
    if (percpu::rseq_active()) {
      EXPECT_NE(s, status::compare_failed);
      committed += s == status::committed;
    } else {
      ASSERT_EQ(s, status::index_changed);
    }
  }
  EXPECT_EQ(percpu::test::sum(slots), committed);
  if (percpu::rseq_active()) {
    EXPECT_EQ(committed, 10);  // 1000 attempts: preemption cannot abort them all
  } else {
    // The default policy does the same operations through the fallback.
    const int index = percpu::current_index<M>();
    EXPECT_EQ(percpu::add<M>(&slots[index].value, 1, index), status::committed);
    std::intptr_t head = reinterpret_cast<std::intptr_t>(item), out = 0;
    const status popped = percpu::pop<M, rseq_only>(&head, 0, 0, &out, index);
    EXPECT_EQ(popped, status::index_changed);
    EXPECT_EQ(head, reinterpret_cast<std::intptr_t>(item));
    EXPECT_EQ(percpu::pop<M>(&head, 0, 0, &out, index), status::committed);
    EXPECT_EQ(out, reinterpret_cast<std::intptr_t>(item));
    EXPECT_EQ(percpu::test::sum(slots), 1);
  }
}

// retry() hands a named attempt to its slow path by reference: the caller sees what every
// attempt did to it, not only the first (which runs inline).
TEST(Ops, RetryRunsEveryAttemptOfANamedAttemptOnIt) {
  struct counting {
    int calls = 0;
    status operator()(int) { return ++calls < 3 ? status::aborted : status::committed; }
  } attempt;
  EXPECT_EQ(percpu::retry<index_mode::cpu_id>(attempt), status::committed);
  EXPECT_EQ(attempt.calls, 3);
}

TEST(Ops, AnIndexSpaceIsSizedByPossibleCpus) {
  const auto& t = percpu::machine_topology();
  EXPECT_EQ(t.cpu_id_bound, t.possible_cpus.back() + 1);
  EXPECT_LE(t.mm_cid_bound, t.cpu_id_bound);
}

}  // namespace
