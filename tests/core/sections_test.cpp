// Every critical section this program contains keeps the rseq ABI: its descriptor (found through
// __rseq_cs_ptr_array, as a debugger would) is 32-byte aligned, version 0, flags 0, a non-empty
// section before its abort handler, the signature in the 4 bytes before the abort IP (on x86-64
// as the operand of a ud1), and each early exit listed in __rseq_exit_point_array starts a section.
#include <gtest/gtest.h>

#include <percpu/percpu.h>
#include <cstdint>
#include <cstring>
#include <set>

extern "C" {
// Provided by the linker for sections whose names are C identifiers.
extern const std::uint64_t __start___rseq_cs_ptr_array[] __attribute__((weak));
extern const std::uint64_t __stop___rseq_cs_ptr_array[] __attribute__((weak));
extern const std::uint64_t __start___rseq_exit_point_array[] __attribute__((weak));
extern const std::uint64_t __stop___rseq_exit_point_array[] __attribute__((weak));
}

namespace {

// Makes sure each kind of section is linked into this test program.
void use_every_operation() {
  using M = std::integral_constant<percpu::index_mode, percpu::index_mode::cpu_id>;
  static std::intptr_t v = 0, v2 = 0, out = 0;
  const int cpu = percpu::current_cpu();
  (void)percpu::add<M::value>(&v, 1, cpu);
  (void)percpu::compare_store<M::value>(&v, 1, 0, cpu);
  (void)percpu::compare_compare_store<M::value>(&v, 0, &v2, 0, 0, cpu);
  (void)percpu::pop<M::value>(&v, 0, 0, &out, cpu);
  (void)percpu::compare_store_store<M::value>(&v, 0, &v2, 0, 0, cpu);
  char buf[8];
  (void)percpu::compare_memcpy_store<M::value>(&v, 0, buf, buf, 0, 0, cpu);
  (void)percpu::current_cpu_node();
}

TEST(Sections, DescriptorsKeepTheAbi) {
  use_every_operation();
  ASSERT_NE(__start___rseq_cs_ptr_array, nullptr) << "no __rseq_cs_ptr_array section";
  const std::size_t n = __stop___rseq_cs_ptr_array - __start___rseq_cs_ptr_array;
  ASSERT_GE(n, 7u) << "every operation and the cpu/node pair should have a descriptor";
  std::set<std::uint64_t> starts;
  for (std::size_t i = 0; i < n; ++i) {
    const auto addr = __start___rseq_cs_ptr_array[i];
    ASSERT_EQ(addr % 32, 0u) << "descriptor not 32-byte aligned";
    const auto* d = reinterpret_cast<const percpu::abi::rseq_cs_descriptor*>(addr);
    EXPECT_EQ(d->version, 0u);
    EXPECT_EQ(d->flags, 0u);
    EXPECT_GT(d->post_commit_offset, 0u);
    EXPECT_LT(d->post_commit_offset, 512u);
    // The abort handler is outside [start, start + post_commit_offset).
    EXPECT_TRUE(d->abort_ip < d->start_ip || d->abort_ip >= d->start_ip + d->post_commit_offset);
    const auto* abort_ip = reinterpret_cast<const unsigned char*>(d->abort_ip);
    std::uint32_t sig;
    std::memcpy(&sig, abort_ip - 4, 4);
    EXPECT_EQ(sig, percpu::abi::kSignature) << "descriptor " << i;
#if defined(__x86_64__)
    const unsigned char ud1[3] = {0x0f, 0xb9, 0x3d};
    EXPECT_EQ(std::memcmp(abort_ip - 7, ud1, 3), 0) << "signature is not a ud1 operand";
#endif  // on aarch64 the signature is itself an instruction (brk #0x45e0)
    starts.insert(d->start_ip);
  }
  ASSERT_NE(__start___rseq_exit_point_array, nullptr);
  const std::size_t m = __stop___rseq_exit_point_array - __start___rseq_exit_point_array;
  ASSERT_EQ(m % 2, 0u);
  ASSERT_GE(m / 2, 6u);
  for (std::size_t i = 0; i < m; i += 2) {
    EXPECT_EQ(starts.count(__start___rseq_exit_point_array[i]), 1u)
        << "exit point whose start is not a section's start";
    EXPECT_NE(__start___rseq_exit_point_array[i + 1], 0u);
  }
}

}  // namespace
