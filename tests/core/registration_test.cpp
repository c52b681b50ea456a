#include <gtest/gtest.h>

#include <percpu/percpu.h>
#include <cstdint>
#include <functional>
#include <thread>

#include "expect.h"

namespace {

TEST(Registration, MatchesTheModeThisPassExpects) {
  const std::string expected = percpu::test::expected_mode();
  if (expected.empty()) GTEST_SKIP() << "PERCPU_EXPECT not set (scripts/run-tests.sh sets it)";
  const auto reg = percpu::registration();
  const std::string found = reg.fallback ? "fallback" : percpu::to_string(reg.owner);
  EXPECT_EQ(found, expected) << "fallback reason: " << reg.fallback_reason;
}

TEST(Registration, WeakGlibcSymbolsResolve) {
  // glibc 2.36 exports __rseq_offset/__rseq_size in every mode (its __rseq_size is 0 when it
  // did not register); a null address here means the weak reference silently failed.
  EXPECT_TRUE(percpu::registration().glibc_symbols);
}

TEST(Registration, ReportsWhyWhenNotGlibc) {
  const auto reg = percpu::registration();
  if (reg.owner == percpu::area_owner::glibc) {
    EXPECT_GT(reg.glibc_rseq_size, 0u);
    EXPECT_TRUE(reg.glibc_reason.empty());
  } else {
    EXPECT_FALSE(reg.glibc_reason.empty());
  }
  if (reg.fallback) {
    EXPECT_FALSE(reg.fallback_reason.empty());
    EXPECT_FALSE(percpu::rseq_active());
  } else {
    EXPECT_TRUE(percpu::rseq_active());
    EXPECT_GE(reg.area_extent, percpu::abi::kOriginalAreaSize);
  }
}

TEST(Registration, FieldsFollowTheRule) {
  const auto reg = percpu::registration();
  if (reg.owner == percpu::area_owner::none) {
    EXPECT_FALSE(reg.fields.node_id);
    EXPECT_FALSE(reg.fields.mm_cid);
    return;
  }
  EXPECT_EQ(reg.fields, percpu::abi::decide_usable_fields(reg.area_extent, reg.feature_size));
  // Our machines: Linux 6.18 fills 28 bytes, so node_id and mm_cid must be usable.
  if (reg.feature_size >= 28) {
    EXPECT_TRUE(reg.fields.node_id);
    EXPECT_TRUE(reg.fields.mm_cid);
  }
}

TEST(Registration, OwnAreaIsUnregisteredWithItsLengthAndRegisteredAgain) {
  const auto reg = percpu::registration();
  if (reg.owner != percpu::area_owner::percpu) GTEST_SKIP() << "percpu does not own the area";
  std::thread t([] {
    EXPECT_GE(percpu::current_cpu(), 0);  // first use registers this new thread
    // The kernel refuses to unregister with another length or address (EINVAL), so success
    // shows the registration was ours, with the length recorded.
    EXPECT_EQ(percpu::detail::unregister_this_thread(), 0);
    EXPECT_EQ(percpu::detail::unregister_this_thread(), EINVAL);  // nothing left to unregister
    EXPECT_GE(percpu::current_cpu(), 0);                          // registers again
    EXPECT_EQ(percpu::detail::unregister_this_thread(), 0);
    EXPECT_GE(percpu::current_cpu(), 0);
  });
  t.join();
  EXPECT_TRUE(percpu::rseq_active());
}

// percpu's own area holds an mm_cid beyond every index space whenever it is not registered
// (before the thread's first use and after each unregistration, when the kernel has reset it to
// 0), so mm_cid mode's sections, which no longer check cpu_id, leave at their bound compare.
TEST(Registration, OwnAreaKeepsMmCidOutOfTheIndexSpaceWhileUnregistered) {
  const auto reg = percpu::registration();
  if (reg.owner != percpu::area_owner::percpu) GTEST_SKIP() << "percpu does not own the area";
  const auto unregistered = static_cast<std::int32_t>(percpu::abi::kMmCidUnregistered);
  auto mm_cid_field = [&] {
    return percpu::arch::load_area_i32<percpu::abi::kOffMmCid>(reg.rseq_offset);
  };
  std::thread t([&] {
    EXPECT_EQ(mm_cid_field(), unregistered);  // the TLS image's value, before any use
    percpu::counter<std::int64_t, percpu::index_mode::mm_cid> c;
    for (int i = 0; i < 1000; ++i) c.add(1);  // the first add registers the area
    if (reg.fields.mm_cid) {
      EXPECT_GE(mm_cid_field(), 0);
      EXPECT_LT(mm_cid_field(), percpu::machine_topology().mm_cid_bound);
    }
    EXPECT_EQ(percpu::detail::unregister_this_thread(), 0);
    EXPECT_EQ(mm_cid_field(), unregistered);
    for (int i = 0; i < 1000; ++i) c.add(1);  // registers again
    EXPECT_EQ(c.load(), 2000);
    EXPECT_EQ(percpu::detail::unregister_this_thread(), 0);
  });
  t.join();
  EXPECT_TRUE(percpu::rseq_active());
}

TEST(Registration, EveryGetcpuCallRegistersANewThread) {
  if (percpu::registration().owner != percpu::area_owner::percpu)
    GTEST_SKIP() << "percpu does not own the area";
  // Whichever call a thread makes first, it leaves the thread registered.
  const std::function<void()> first_calls[] = {
      [] { percpu::current_cpu(); }, [] { percpu::current_node(); },
      [] { percpu::current_mm_cid(); }, [] { percpu::current_cpu_node(); }};
  for (const auto& call : first_calls) {
    std::thread t([&] {
      call();
      EXPECT_EQ(percpu::detail::unregister_this_thread(), 0);
    });
    t.join();
  }
}

}  // namespace
