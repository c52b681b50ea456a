// The C API's getcpu cache and report (<percpu.h>): the slow paths the inline C fast paths call,
// the consistent cpu+node pair, percpu_info().
#include <percpu.h>

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <string>

#include "c_api/c_handle.h"
#include "percpu/cpu.h"
#include "percpu/internal/c_getcpu.h"
#include "percpu/runtime.h"
#include "percpu/topology.h"

// The C view of the hot state must be the C++ one, field for field.
#define PERCPU_SAME_FIELD(f)                                                              \
  static_assert(                                                                          \
      offsetof(percpu_internal_hot_state, f) == offsetof(percpu::detail::hot_state, f) && \
          sizeof(percpu_internal_hot_state::f) == sizeof(percpu::detail::hot_state::f),   \
      "c_getcpu.h's hot state differs from runtime.h's: " #f)
PERCPU_SAME_FIELD(rseq_offset);
PERCPU_SAME_FIELD(mm_cid_index_offset);
PERCPU_SAME_FIELD(registration_offset);
PERCPU_SAME_FIELD(fallback);
PERCPU_SAME_FIELD(node_usable);
PERCPU_SAME_FIELD(mm_cid_usable);
PERCPU_SAME_FIELD(cpu_section_bound);
PERCPU_SAME_FIELD(mm_section_bound);
PERCPU_SAME_FIELD(mm_cid_field_bound);
PERCPU_SAME_FIELD(cpu_word);
PERCPU_SAME_FIELD(mm_cid_word);
#undef PERCPU_SAME_FIELD
static_assert(PERCPU_CPU_ID == static_cast<int>(percpu::index_mode::cpu_id) &&
              PERCPU_MM_CID == static_cast<int>(percpu::index_mode::mm_cid));

namespace {
void copy_text(char (&to)[256], const std::string& from) noexcept {
  const std::size_t n = from.size() < sizeof(to) - 1 ? from.size() : sizeof(to) - 1;
  std::memcpy(to, from.data(), n);
  to[n] = '\0';
}
}  // namespace

extern "C" {

PERCPU_C_API int percpu_internal_current_cpu_slow(void) {
  return percpu::detail::current_cpu_slow();
}
PERCPU_C_API int percpu_internal_current_mm_cid_slow(void) {
  return percpu::detail::current_mm_cid_slow();
}
PERCPU_C_API int percpu_internal_current_node_slow(void) {
  return percpu::detail::current_node_slow();
}

PERCPU_C_API percpu_cpu_node percpu_current_cpu_node(void) {
  const percpu::cpu_node pair = percpu::current_cpu_node();
  return {pair.cpu, pair.node};
}

PERCPU_C_API int percpu_info(struct percpu_info* info) {
  if (info == nullptr) return -EINVAL;
  return percpu::c_api::guarded([&] {
    const percpu::registration_info r = percpu::registration();
    const percpu::topology& t = percpu::machine_topology();
    struct percpu_info out {};
    out.rseq_active = !r.fallback;
    out.area_owner = percpu::to_string(r.owner);
    copy_text(out.fallback_reason, r.fallback_reason);
    out.registration_errno = r.registration_errno;
    copy_text(out.glibc_reason, r.glibc_reason);
    out.glibc_rseq_size = r.glibc_rseq_size;
    out.feature_size = r.feature_size;
    out.node_id_usable = r.fields.node_id;
    out.mm_cid_usable = r.fields.mm_cid;
    out.cpu_id_bound = t.cpu_id_bound;
    out.mm_cid_bound = t.mm_cid_bound;
    out.possible_cpus = static_cast<int>(t.possible_cpus.size());
    out.online_cpus = static_cast<int>(t.online_cpus.size());
    out.nodes = static_cast<int>(t.nodes.size());
    *info = out;
    return 0;
  });
}

}  // extern "C"
