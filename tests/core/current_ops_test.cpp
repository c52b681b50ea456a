// The current-index sections of the structures' fast paths (current_ops.h), one thread: each
// reads the calling thread's index itself and works on that index's slot; it reports a miss (an
// empty or full stack, an empty list, a held lock) without storing, and leaves to the slow path
// (slow) a closed slot and every case it cannot serve, storing nothing. Typed over both modes.
#include <gtest/gtest.h>

#include <percpu/current_ops.h>
#include <percpu/percpu.h>
#include <percpu/remote.h>
#include <cstdint>
#include <thread>
#include <vector>

#include "modes.h"
#include "pin.h"

namespace {

using percpu::index_mode;
using percpu::detail::current_result;

template <class T>
class CurrentOps : public ::testing::Test {};
TYPED_TEST_SUITE(CurrentOps, percpu::test::Modes);

// One 64-byte region per index (enough for a stack of 7 entries), filled with -1 beyond what
// a test sets, so a stray store shows.
struct regions {
  struct alignas(64) region {
    std::intptr_t w[8];
  };
  std::vector<region> r;
  regions() : r(static_cast<std::size_t>(percpu::machine_topology().cpu_id_bound)) {
    for (region& x : r)
      for (std::intptr_t& w : x.w) w = -1;
  }
  percpu::arch::slot_table table() const {
    return {reinterpret_cast<std::uintptr_t>(r.data()), sizeof(region)};
  }
  std::intptr_t* at(int index) { return r[static_cast<std::size_t>(index)].w; }
};

// Whether this process's current-index sections of mode M run: rseq mode, and for mm_cid a
// kernel that fills mm_cid (elsewhere its section bound is 0 and the slow paths serve it).
template <index_mode M>
bool sections_serve() {
  return percpu::rseq_active() && (M == index_mode::cpu_id || percpu::registration().fields.mm_cid);
}

// Runs `op` until the kernel lets it through without an abort (a preemption can abort any
// attempt; nothing is stored then).
template <class Op>
current_result unaborted(Op&& op) {
  current_result r;
  do {
    r = op();
  } while (r == current_result::aborted);
  return r;
}

// The calling thread's pinned index of mode M (one thread: its mm_cid does not change).
template <index_mode M>
int index_now() {
  return M == index_mode::cpu_id ? percpu::current_cpu() : percpu::current_mm_cid();
}

TYPED_TEST(CurrentOps, AddCommitsOnTheCurrentSlotOnly) {
  constexpr index_mode M = TypeParam::value;
  percpu::test::pinned pin(percpu::machine_topology().allowed_cpus.front());
  ASSERT_TRUE(pin.ok());
  regions g;
  for (auto& x : g.r) x.w[0] = 0;
  const current_result r = unaborted([&] { return percpu::detail::current_add<M>(g.table(), 5); });
  if (!sections_serve<M>()) {
    EXPECT_EQ(r, current_result::slow);
    for (auto& x : g.r) EXPECT_EQ(x.w[0], 0);
    return;
  }
  ASSERT_EQ(r, current_result::committed);
  const int here = index_now<M>();
  for (int i = 0; i < static_cast<int>(g.r.size()); ++i) EXPECT_EQ(g.at(i)[0], i == here ? 5 : 0);
  EXPECT_EQ(g.at(here)[1], -1);
}

TYPED_TEST(CurrentOps, CompareStoreGivesTheWordAndIndexAndMissesOnAnotherValue) {
  constexpr index_mode M = TypeParam::value;
  if (!sections_serve<M>()) GTEST_SKIP() << "this mode's sections do not run here";
  percpu::test::pinned pin(percpu::machine_topology().allowed_cpus.front());
  ASSERT_TRUE(pin.ok());
  regions g;
  for (auto& x : g.r) x.w[0] = 0;
  std::intptr_t* word = nullptr;
  int index = -1;
  auto cas = [&](std::intptr_t expect, std::intptr_t newv) {
    return unaborted([&] {
      return percpu::detail::current_compare_store<M>(g.table(), expect, newv, word, index);
    });
  };
  ASSERT_EQ(cas(0, 1), current_result::committed);
  EXPECT_EQ(index, index_now<M>());
  EXPECT_EQ(word, g.at(index));
  EXPECT_EQ(*word, 1);
  word = nullptr;
  EXPECT_EQ(cas(0, 7), current_result::miss);  // held: nothing stored
  EXPECT_EQ(*g.at(index), 1);
  EXPECT_EQ(word, nullptr);
}

struct item {
  std::intptr_t pad = 0;
  item* next = nullptr;
};

TYPED_TEST(CurrentOps, ListIsLifoMissesWhenEmptyAndLeavesAClosedGateToTheSlowPath) {
  constexpr index_mode M = TypeParam::value;
  if (!sections_serve<M>()) GTEST_SKIP() << "this mode's sections do not run here";
  percpu::test::pinned pin(percpu::machine_topology().allowed_cpus.front());
  ASSERT_TRUE(pin.ok());
  regions g;
  for (auto& x : g.r) x.w[0] = x.w[1] = 0;  // head, gate (open)
  const std::ptrdiff_t link = offsetof(item, next);
  item a, b;
  auto push = [&](item& it) {
    return unaborted([&] {
      return percpu::detail::current_compare_push<M>(g.table(), link,
                                                     reinterpret_cast<std::intptr_t>(&it));
    });
  };
  std::intptr_t out = 0;
  auto pop = [&] {
    return unaborted([&] { return percpu::detail::current_compare_pop<M>(g.table(), link, out); });
  };
  EXPECT_EQ(pop(), current_result::miss);
  ASSERT_EQ(push(a), current_result::committed);
  ASSERT_EQ(push(b), current_result::committed);
  std::intptr_t* sl = g.at(index_now<M>());
  EXPECT_EQ(sl[0], reinterpret_cast<std::intptr_t>(&b));
  EXPECT_EQ(b.next, &a);
  sl[1] = 1;  // a drain closed the gate
  EXPECT_EQ(pop(), current_result::slow);
  item c;
  EXPECT_EQ(push(c), current_result::slow);
  EXPECT_EQ(c.next, nullptr);
  EXPECT_EQ(sl[0], reinterpret_cast<std::intptr_t>(&b));
  sl[1] = 0;
  ASSERT_EQ(pop(), current_result::committed);
  EXPECT_EQ(out, reinterpret_cast<std::intptr_t>(&b));
  ASSERT_EQ(pop(), current_result::committed);
  EXPECT_EQ(out, reinterpret_cast<std::intptr_t>(&a));
  EXPECT_EQ(pop(), current_result::miss);
  EXPECT_EQ(sl[0], 0);
}

TYPED_TEST(CurrentOps, StackKeepsItsCountAndTellsFullEmptyAndClosedApart) {
  constexpr index_mode M = TypeParam::value;
  if (!sections_serve<M>()) GTEST_SKIP() << "this mode's sections do not run here";
  percpu::test::pinned pin(percpu::machine_topology().allowed_cpus.front());
  ASSERT_TRUE(pin.ok());
  regions g;
  for (auto& x : g.r) x.w[0] = 0;
  constexpr std::uintptr_t kLimit = 3;
  auto push = [&](std::intptr_t v) {
    return unaborted([&] { return percpu::detail::current_array_push<M>(g.table(), kLimit, v); });
  };
  std::intptr_t out = 0;
  auto pop = [&] {
    return unaborted([&] { return percpu::detail::current_array_pop<M>(g.table(), out); });
  };
  EXPECT_EQ(pop(), current_result::miss);  // empty
  for (std::intptr_t v = 10; v < 13; ++v) ASSERT_EQ(push(v), current_result::committed);
  std::intptr_t* st = g.at(index_now<M>());
  EXPECT_EQ(st[0], 3);
  EXPECT_EQ(push(13), current_result::miss);  // full: nothing stored above the count
  EXPECT_EQ(st[4], -1);
  ASSERT_EQ(pop(), current_result::committed);
  EXPECT_EQ(out, 12);
  EXPECT_EQ(st[0], 2);
  st[0] = percpu::detail::kCountClosed | 2;  // a drain closed it
  out = 0;
  EXPECT_EQ(pop(), current_result::slow);
  EXPECT_EQ(push(14), current_result::slow);
  EXPECT_EQ(st[0], percpu::detail::kCountClosed | 2);
  EXPECT_EQ(st[3], 12);  // the entry above the count is untouched
  EXPECT_EQ(out, 0);
  st[0] = 2;
  ASSERT_EQ(pop(), current_result::committed);
  EXPECT_EQ(out, 11);
  ASSERT_EQ(pop(), current_result::committed);
  EXPECT_EQ(out, 10);
  EXPECT_EQ(pop(), current_result::miss);
  EXPECT_EQ(st[0], 0);
}

// A thread whose area is not registered (here: percpu's own area, unregistered) must not run
// sections: the kernel would not abort them. The kernel resets mm_cid to 0 at unregistration;
// percpu's own area then stores an mm_cid beyond every index space, which the sections' bound
// compare rejects (on aarch64 the sections' cpu_id check rejects it first). Nothing is stored;
// the next getcpu-cache call registers the thread again.
TYPED_TEST(CurrentOps, AThreadWhoseAreaIsUnregisteredRunsNoSection) {
  constexpr index_mode M = TypeParam::value;
  if (percpu::registration().owner != percpu::area_owner::percpu)
    GTEST_SKIP() << "percpu does not own the area (run with GLIBC_TUNABLES=glibc.pthread.rseq=0)";
  if (!sections_serve<M>()) GTEST_SKIP() << "this mode's sections do not run here";
  std::thread t([] {
    regions g;
    for (auto& x : g.r) x.w[0] = 0;
    (void)percpu::current_cpu();  // registers this thread
    ASSERT_EQ(percpu::detail::unregister_this_thread(), 0);
    EXPECT_EQ(percpu::detail::current_add<M>(g.table(), 1), current_result::slow);
    std::intptr_t out = 0;
    EXPECT_EQ(percpu::detail::current_array_pop<M>(g.table(), out), current_result::slow);
    for (auto& x : g.r) EXPECT_EQ(x.w[0], 0);
    (void)percpu::current_cpu();  // registers it again
    EXPECT_EQ(unaborted([&] { return percpu::detail::current_add<M>(g.table(), 1); }),
              current_result::committed);
  });
  t.join();
}

// In fallback mode (and for mm_cid on kernels without it) the section bound is 0: every
// section leaves before touching its slot, and the structures' slow paths take over.
TYPED_TEST(CurrentOps, WhereTheyCannotServeEverySectionIsSlowAndStoresNothing) {
  constexpr index_mode M = TypeParam::value;
  if (sections_serve<M>()) GTEST_SKIP() << "this mode's sections run here";
  regions g;
  for (auto& x : g.r) x.w[0] = x.w[1] = 0;
  std::intptr_t* word = nullptr;
  int index = -1;
  std::intptr_t out = 0;
  item a;
  using percpu::detail::current_add;
  EXPECT_EQ(current_add<M>(g.table(), 1), current_result::slow);
  EXPECT_EQ(percpu::detail::current_compare_store<M>(g.table(), 0, 1, word, index),
            current_result::slow);
  EXPECT_EQ(percpu::detail::current_compare_push<M>(g.table(), offsetof(item, next),
                                                    reinterpret_cast<std::intptr_t>(&a)),
            current_result::slow);
  EXPECT_EQ(percpu::detail::current_compare_pop<M>(g.table(), offsetof(item, next), out),
            current_result::slow);
  EXPECT_EQ(percpu::detail::current_array_push<M>(g.table(), 3, 5), current_result::slow);
  EXPECT_EQ(percpu::detail::current_array_pop<M>(g.table(), out), current_result::slow);
  for (auto& x : g.r) {
    EXPECT_EQ(x.w[0], 0);
    EXPECT_EQ(x.w[1], 0);
    EXPECT_EQ(x.w[2], -1);
  }
  EXPECT_EQ(a.next, nullptr);
}

}  // namespace
