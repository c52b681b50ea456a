// The kernel's rseq ABI as percpu uses it: the layout of the per-thread rseq area and of a
// critical-section descriptor, the signature, and the rule that decides which fields of an area
// may be read.
//
// Source: Linux include/uapi/linux/rseq.h and Documentation/userspace-api/rseq.rst. Debian 12's
// <linux/rseq.h> predates node_id/mm_cid (Linux 6.3), so the layout is restated here and pinned
// with static_asserts.
#pragma once

#define PERCPU_PUBLIC_HEADER 1  // lets it include percpu/internal/

#include "percpu/internal/config.h"  // first: the C++20 check

#include <cstddef>
#include <cstdint>

namespace percpu::abi {

/// Signature the kernel checks in the 4 bytes before every abort handler. Must equal the
/// signature the rseq area was registered with (glibc uses these, RSEQ_SIG):
/// - x86-64: the displacement of a `ud1 0x53053053(%rip), %edi` (0f b9 3d + imm32);
/// - aarch64: 0xd428bc00, the encoding of `brk #0x45e0`;
/// either way, execution that falls into an abort handler traps.
#if defined(__aarch64__)
inline constexpr std::uint32_t kSignature = 0xd428bc00;
#else
inline constexpr std::uint32_t kSignature = 0x53053053;
#endif

/// System call number of rseq(2): 334 on x86-64, 293 on aarch64 (the generic table).
#if defined(__aarch64__)
inline constexpr long kSysRseq = 293;
#else
inline constexpr long kSysRseq = 334;
#endif

/// rseq(2) flag: unregister the area.
inline constexpr int kFlagUnregister = 1;

/// Original size of struct rseq (Linux 4.18): the length every kernel accepts, in bytes.
inline constexpr std::uint32_t kOriginalAreaSize = 32;

/// Bytes the kernel fills when it does not report AT_RSEQ_FEATURE_SIZE (kernels before 6.3):
/// cpu_id_start, cpu_id, rseq_cs and flags.
inline constexpr std::uint32_t kOriginalFeatureSize = 20;

/// Values of `cpu_id` that are not CPUs.
inline constexpr std::int32_t kCpuIdUninitialized = -1;
inline constexpr std::int32_t kCpuIdRegistrationFailed = -2;
/// The mm_cid percpu's own area holds while it is not registered (not a kernel value): beyond
/// every index space, so a section reading it leaves at its bound compare.
inline constexpr std::uint32_t kMmCidUnregistered = 0xFFFFFFFF;

/// struct rseq: the per-thread area. The kernel writes cpu_id_start, cpu_id, node_id and mm_cid;
/// user space writes only rseq_cs and slice_ctrl.request (and never the others: newer kernels
/// kill a process that does). Source: include/uapi/linux/rseq.h.
struct alignas(32) rseq_area {
  std::uint32_t cpu_id_start;  // off 0: always a valid CPU (0 before registration)
  std::int32_t cpu_id;    // off 4: current CPU, or kCpuIdUninitialized/kCpuIdRegistrationFailed
  std::uint64_t rseq_cs;  // off 8: address of the active rseq_cs descriptor, or 0
  std::uint32_t flags;    // off 16: the kernel's feature bits (7.0: slice extension), read-only
  std::uint32_t node_id;  // off 20: NUMA node of cpu_id (Linux 6.3)
  std::uint32_t mm_cid;   // off 24: concurrency id within the process (Linux 6.3)
  std::uint8_t slice_ctrl[4];  // off 28: time-slice extension: request, granted (Linux 7.0)
};
static_assert(offsetof(rseq_area, cpu_id) == 4);
static_assert(offsetof(rseq_area, rseq_cs) == 8);
static_assert(offsetof(rseq_area, node_id) == 20);
static_assert(offsetof(rseq_area, mm_cid) == 24);
static_assert(offsetof(rseq_area, slice_ctrl) == 28);
static_assert(sizeof(rseq_area) == kOriginalAreaSize);

/// Byte offsets of the fields, for asm operands.
inline constexpr std::uint32_t kOffCpuId = 4;
inline constexpr std::uint32_t kOffRseqCs = 8;
inline constexpr std::uint32_t kOffNodeId = 20;
inline constexpr std::uint32_t kOffMmCid = 24;
inline constexpr std::uint32_t kOffSliceCtrl = 28;  // slice_ctrl.request; granted at +1

/// struct rseq_cs: one per critical section, 32-byte aligned, never changed after link time.
struct alignas(32) rseq_cs_descriptor {
  std::uint32_t version;             // 0
  std::uint32_t flags;               // 0: restart on preemption, signal and migration
  std::uint64_t start_ip;            // first instruction of the section
  std::uint64_t post_commit_offset;  // bytes from start_ip to just after the commit store
  std::uint64_t abort_ip;            // handler; preceded by kSignature
};
static_assert(sizeof(rseq_cs_descriptor) == 32);

/// Which optional fields of a registered area hold kernel-written values.
struct usable_fields {
  bool node_id = false;
  bool mm_cid = false;
  friend bool operator==(const usable_fields&, const usable_fields&) = default;
};

/// The registered extent of glibc's area, in bytes, from its exported `__rseq_size`.
///
/// `__rseq_size` has meant three things: 32 (glibc 2.35-2.39: the allocated area), 20 (2.40 and its
/// backports: the original feature size, although glibc still registers 32 bytes) and the kernel's
/// feature size (2.41+, which registers at least 32 bytes). In every case the area glibc registered
/// spans max(32, __rseq_size) bytes. Returns 0 when `rseq_size` is 0 (glibc did not register).
constexpr std::uint32_t glibc_area_extent(std::uint32_t rseq_size) {
  if (rseq_size == 0) return 0;
  return rseq_size < kOriginalAreaSize ? kOriginalAreaSize : rseq_size;
}

/// The one rule for which fields may be read: a field is usable when it lies inside what the
/// kernel fills (`feature_size`, from getauxval(AT_RSEQ_FEATURE_SIZE); 0 means the auxv entry is
/// absent, i.e. a kernel before 6.3 that fills the original 20 bytes) and inside the registered
/// area (`area_extent` bytes; 0 means no area is registered).
constexpr usable_fields decide_usable_fields(std::uint32_t area_extent,
                                             unsigned long feature_size) {
  const unsigned long filled = feature_size == 0 ? kOriginalFeatureSize : feature_size;
  const unsigned long limit = filled < area_extent ? filled : area_extent;
  usable_fields u;
  u.node_id = limit >= kOffNodeId + sizeof(std::uint32_t);
  u.mm_cid = limit >= kOffMmCid + sizeof(std::uint32_t);
  return u;
}

}  // namespace percpu::abi
