// The C API's histogram (<percpu.h>: percpu_histogram_*): percpu::histogram<M> and its
// snapshots.
#include <percpu.h>

#include <cerrno>
#include <cstdint>
#include <memory>
#include <system_error>

#include "c_api/c_handle.h"
#include "percpu/histogram.h"
#include "percpu/histogram_snapshot.h"

using percpu::index_mode;

struct percpu_histogram : percpu::c_api::handle<0x70636869, percpu::histogram<index_mode::cpu_id>,
                                                percpu::histogram<index_mode::mm_cid>> {
  using handle::handle;
};

struct percpu_histogram_snapshot {
  static constexpr std::uint32_t kTag = 0x70636873;
  std::uint32_t tag = kTag;
  percpu::histogram_snapshot snapshot;
};

namespace c = percpu::c_api;

namespace {
// A snapshot query: f(snapshot), or 0 for a bad handle.
template <class F>
std::uint64_t query(const percpu_histogram_snapshot* s, F f) noexcept {
  return c::valid<percpu_histogram_snapshot>(s) ? f(s->snapshot) : 0;
}
}  // namespace

extern "C" {

PERCPU_C_API percpu_histogram* percpu_histogram_create(percpu_index_mode mode, uint64_t max_value,
                                                       int precision_bits) {
  const bool valid = precision_bits >= -1;  // -1: the default; 0 to 14 otherwise
  return c::created_in<percpu_histogram>(mode, valid, [&] {
    const percpu::histogram_layout layout(
        precision_bits < 0 ? percpu::histogram_layout::kDefaultPrecisionBits : precision_bits,
        max_value != 0 ? max_value : percpu::histogram_layout::kDefaultMaxValue);
    return new percpu_histogram(mode, layout);
  });
}

PERCPU_C_API void percpu_histogram_destroy(percpu_histogram* h) {
  c::destroyed<percpu_histogram>(h);
}

PERCPU_C_API int percpu_histogram_record(percpu_histogram* h, uint64_t value) {
  if (!c::valid<percpu_histogram>(h)) [[unlikely]]
    return -EINVAL;
  h->with([value](auto& hist) { hist.record(value); });
  return 0;
}

PERCPU_C_API percpu_histogram_snapshot* percpu_histogram_snapshot_take(percpu_histogram* h,
                                                                       int reset) {
  if (!c::valid<percpu_histogram>(h)) {
    errno = EINVAL;
    return nullptr;
  }
  return c::created<percpu_histogram_snapshot>([&] {
    return h->with([reset](auto& hist) {
      auto s = std::make_unique<percpu_histogram_snapshot>(percpu_histogram_snapshot{
          percpu_histogram_snapshot::kTag, percpu::histogram_snapshot(hist.layout())});
      const std::error_code e = reset != 0 ? hist.snapshot_and_reset_or_error(s->snapshot)
                                           : hist.snapshot_or_error(s->snapshot);
      if (e) throw std::system_error(e);  // nothing lost: the next snapshot has the records
      return s.release();
    });
  });
}

PERCPU_C_API void percpu_histogram_snapshot_destroy(percpu_histogram_snapshot* s) {
  c::destroyed<percpu_histogram_snapshot>(s);
}

PERCPU_C_API uint64_t percpu_histogram_snapshot_count(const percpu_histogram_snapshot* s) {
  return query(s, [](const auto& snap) { return snap.count(); });
}
PERCPU_C_API uint64_t percpu_histogram_snapshot_sum(const percpu_histogram_snapshot* s) {
  return query(s, [](const auto& snap) { return snap.sum(); });
}
PERCPU_C_API uint64_t percpu_histogram_snapshot_above_range(const percpu_histogram_snapshot* s) {
  return query(s, [](const auto& snap) { return snap.above_range(); });
}
PERCPU_C_API uint64_t percpu_histogram_snapshot_min(const percpu_histogram_snapshot* s) {
  return query(s, [](const auto& snap) { return snap.min(); });
}
PERCPU_C_API uint64_t percpu_histogram_snapshot_max(const percpu_histogram_snapshot* s) {
  return query(s, [](const auto& snap) { return snap.max(); });
}
PERCPU_C_API uint64_t
percpu_histogram_snapshot_count_at_or_below(const percpu_histogram_snapshot* s, uint64_t v) {
  return query(s, [v](const auto& snap) { return snap.count_at_or_below(v); });
}

PERCPU_C_API int percpu_histogram_snapshot_value_at_quantile(const percpu_histogram_snapshot* s,
                                                             double q, uint64_t* value) {
  if (!c::valid<percpu_histogram_snapshot>(s) || value == nullptr) return -EINVAL;
  return c::guarded([&] {
    *value = s->snapshot.value_at_quantile(q);
    return 0;
  });
}

}  // extern "C"
