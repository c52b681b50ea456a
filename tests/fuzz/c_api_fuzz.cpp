// Fuzz target: the C API's handles (<percpu.h>), as docs/c_api.md and the header state them.
//
// The input is a sequence of operations on up to a few live handles of each type: create (any
// mode as an int, any batch, flags, stride, slots, layout), use (with any argument, NULL out
// pointers, indices out of range, pool frees of bases never handed out, freed, of another pool
// or with another size), destroy; and the same calls on handles that are not live ones of the
// type: NULL, a live handle of another type, and memory whose tag is cleared (what a destroyed
// handle is while its memory is not reused; using a really destroyed one is undefined
// behaviour, as after free(), so the target never does). Each answer must be the documented
// one (a negative errno, NULL with errno, 0 from a query), checked against a model kept here:
// values, held nodes, live objects, lock holds, reference states and recorded values. Only
// uses the contract allows: no put without a get, no lock a thread already holds.
#include <errno.h>
#include <fuzzer/FuzzedDataProvider.h>
#include <percpu.h>
#include <percpu/histogram_layout.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <stdexcept>
#include <vector>

#include "c_api_modes.h"
#include "fuzz_check.h"

namespace {

constexpr std::size_t kMaxLive = 3;  // live handles per type
constexpr int kNodes = 24;           // free-list nodes the lists share

int g_slots[2];  // the index spaces: cpu_id, mm_cid (percpu_info)

// What a destroyed handle is as long as its memory is not reused: its tag cleared.
alignas(64) unsigned char g_cleared[256];

bool known_mode(int mode) {
  return mode == PERCPU_CPU_ID || mode == PERCPU_MM_CID;
}

int consume_mode(FuzzedDataProvider& in) {
  switch (in.ConsumeIntegralInRange<int>(0, 7)) {
    case 0:
      return in.ConsumeIntegral<int>();
    case 1:
      return in.ConsumeIntegralInRange<int>(-2, 3);
    default:
      return in.ConsumeBool() ? PERCPU_CPU_ID : PERCPU_MM_CID;
  }
}

// ---- Models ---------------------------------------------------------------------------------

struct counter_model {
  percpu_counter* h;
  std::uint64_t value = 0;  // wraps as uint64_t
};

struct batched_model {
  percpu_batched_counter* h;
  int mode;
  std::int64_t batch;
  __int128 exact = 0;    // the mathematical sum of the adds
  bool wrapped = false;  // it left int64_t's range once: only the wrapped value is checked
  std::int64_t value() const {
    return static_cast<std::int64_t>(static_cast<std::uint64_t>(exact));
  }
};

struct freelist_model {
  percpu_freelist* h;
  int mode;
  bool checked;
  std::set<int> nodes;  // held, in any index's list
};

struct pool_model {
  percpu_pool* h;
  int mode;
  std::size_t stride;
  int slots;
  std::map<char*, std::size_t> live;  // base -> size allocated
};

struct rwsem_model {
  percpu_rwsem* h;
  int readers = 0;  // shared holds of this thread
  bool writer = false;
};

struct ref_model {
  percpu_ref* h = nullptr;
  enum { live, dying, released } state = live;
  std::int64_t extra = 0;  // references taken beyond the initial one
  bool has_release = true;
  bool destroy_in_release = false;
  int releases = 0;
  bool gone = false;  // its release callback destroyed it
};

struct histogram_model {
  percpu_histogram* h;
  percpu::histogram_layout layout;
  std::vector<std::uint64_t> values;  // recorded since the last reset
};

struct snapshot_model {
  percpu_histogram_snapshot* h;
  percpu::histogram_layout layout;
  std::vector<std::uint64_t> values;
};

percpu_freelist_node g_nodes[kNodes];
percpu_freelist* g_holder[kNodes];  // the list holding node i, nullptr when free
bool g_holder_checked[kNodes];

int node_index(const percpu_freelist_node* n) {
  const std::ptrdiff_t i = n - g_nodes;
  FUZZ_CHECK_MSG(i >= 0 && i < kNodes, "a node the target never pushed: %p",
                 static_cast<const void*>(n));
  return static_cast<int>(i);
}

enum kind { kCounter, kBatched, kFreelist, kPool, kRwsem, kRef, kHistogram, kSnapshot, kKinds };

struct world {
  std::vector<counter_model> counters;
  std::vector<batched_model> batched;
  std::vector<freelist_model> lists;
  std::vector<pool_model> pools;
  std::vector<rwsem_model> rwsems;
  std::vector<std::unique_ptr<ref_model>> refs;
  std::vector<histogram_model> histograms;
  std::vector<snapshot_model> snapshots;

  // The live handles of every type but `k`.
  std::vector<void*> others(kind k) const {
    std::vector<void*> out;
    if (k != kCounter)
      for (auto& m : counters) out.push_back(m.h);
    if (k != kBatched)
      for (auto& m : batched) out.push_back(m.h);
    if (k != kFreelist)
      for (auto& m : lists) out.push_back(m.h);
    if (k != kPool)
      for (auto& m : pools) out.push_back(m.h);
    if (k != kRwsem)
      for (auto& m : rwsems) out.push_back(m.h);
    if (k != kRef)
      for (auto& m : refs) out.push_back(m->h);
    if (k != kHistogram)
      for (auto& m : histograms) out.push_back(m.h);
    if (k != kSnapshot)
      for (auto& m : snapshots) out.push_back(m.h);
    return out;
  }
};

// A handle that is not a live one of type T (kind k): NULL, a live handle of another type, or
// a cleared tag.
template <class T>
T* bad_handle(FuzzedDataProvider& in, const world& w, kind k) {
  switch (in.ConsumeIntegralInRange<int>(0, 2)) {
    case 0:
      return nullptr;
    case 1: {
      const std::vector<void*> o = w.others(k);
      if (o.empty()) return nullptr;
      return static_cast<T*>(o[in.ConsumeIntegralInRange<std::size_t>(0, o.size() - 1)]);
    }
    default:
      return reinterpret_cast<T*>(g_cleared);
  }
}

template <class V>
std::size_t pick(FuzzedDataProvider& in, const V& v) {
  return in.ConsumeIntegralInRange<std::size_t>(0, v.size() - 1);
}

// errno after a call that returned NULL: `expected`; errno is set to a sentinel first.
#define EXPECT_NULL_ERRNO(call, expected)                                                         \
  do {                                                                                            \
    errno = 12345;                                                                                \
    const void* result_ = (call);                                                                 \
    FUZZ_CHECK_MSG(result_ == nullptr && errno == (expected), "%s: %p, errno %d", #call, result_, \
                   errno);                                                                        \
  } while (0)

// ---- Counter --------------------------------------------------------------------------------

void counter_step(FuzzedDataProvider& in, world& w) {
  if (w.counters.empty() || in.ConsumeIntegralInRange<int>(0, 7) == 0) {
    if (in.ConsumeBool()) {  // create
      const int mode = consume_mode(in);
      errno = 0;
      percpu_counter* c = fuzz_counter_create(mode);
      if (!known_mode(mode)) {
        FUZZ_CHECK(c == nullptr && errno == EINVAL);
      } else if (c == nullptr) {
        FUZZ_CHECK(errno == ENOMEM);
      } else if (w.counters.size() < kMaxLive) {
        w.counters.push_back({c});
      } else {
        percpu_counter_destroy(c);
      }
      return;
    }
    percpu_counter* bad = bad_handle<percpu_counter>(in, w, kCounter);
    std::int64_t v = 7;
    FUZZ_CHECK(percpu_counter_add(bad, 1) == -EINVAL);
    FUZZ_CHECK(percpu_counter_load(bad, &v) == -EINVAL && v == 7);
    FUZZ_CHECK(percpu_counter_reset(bad, &v) == -EINVAL && v == 7);
    percpu_counter_destroy(bad);  // nothing
    return;
  }
  const std::size_t i = pick(in, w.counters);
  counter_model& m = w.counters[i];
  switch (in.ConsumeIntegralInRange<int>(0, 4)) {
    case 0: {
      const std::int64_t n = in.ConsumeIntegral<std::int64_t>();
      FUZZ_CHECK(percpu_counter_add(m.h, n) == 0);
      m.value += static_cast<std::uint64_t>(n);
      break;
    }
    case 1: {
      std::int64_t v = 0;
      FUZZ_CHECK(percpu_counter_load(m.h, &v) == 0);
      FUZZ_CHECK(static_cast<std::uint64_t>(v) == m.value);
      FUZZ_CHECK(percpu_counter_load(m.h, nullptr) == -EINVAL);
      break;
    }
    case 2: {
      std::int64_t taken = 0;
      FUZZ_CHECK(percpu_counter_reset(m.h, &taken) == 0);
      FUZZ_CHECK(static_cast<std::uint64_t>(taken) == m.value);
      m.value = 0;
      FUZZ_CHECK(percpu_counter_reset(m.h, nullptr) == -EINVAL);
      break;
    }
    case 3:
      FUZZ_CHECK(percpu_counter_add(m.h, 0) == 0);
      break;
    default:
      percpu_counter_destroy(m.h);
      w.counters.erase(w.counters.begin() + static_cast<std::ptrdiff_t>(i));
      break;
  }
}

// ---- Batched counter ------------------------------------------------------------------------

std::int64_t consume_batch(FuzzedDataProvider& in) {
  switch (in.ConsumeIntegralInRange<int>(0, 6)) {
    case 0:
      return 0;
    case 1:
      return in.ConsumeIntegralInRange<std::int64_t>(1, 100);
    case 2:
      return (std::int64_t{1} << 40) + in.ConsumeIntegralInRange<std::int64_t>(-1, 1);
    case 3:
      return in.ConsumeIntegralInRange<std::int64_t>(-3, 0);
    case 4:
      return INT64_MIN + in.ConsumeIntegralInRange<std::int64_t>(0, 1);
    case 5:
      return INT64_MAX;
    default:
      return in.ConsumeIntegral<std::int64_t>();
  }
}

std::int64_t consume_amount(FuzzedDataProvider& in) {
  switch (in.ConsumeIntegralInRange<int>(0, 3)) {
    case 0:
      return in.ConsumeIntegralInRange<std::int64_t>(-100, 100);
    case 1:
      return in.ConsumeIntegralInRange<std::int64_t>(-(std::int64_t{1} << 41),
                                                     std::int64_t{1} << 41);
    case 2:
      return in.ConsumeBool() ? INT64_MAX - in.ConsumeIntegralInRange<std::int64_t>(0, 3)
                              : INT64_MIN + in.ConsumeIntegralInRange<std::int64_t>(0, 3);
    default:
      return in.ConsumeIntegral<std::int64_t>();
  }
}

// v + d, wrapping as int64_t two's complement.
std::int64_t near(std::int64_t v, std::int64_t d) {
  return static_cast<std::int64_t>(static_cast<std::uint64_t>(v) + static_cast<std::uint64_t>(d));
}

void batched_add(batched_model& m, std::int64_t n) {
  m.exact += n;
  if (m.exact > INT64_MAX || m.exact < INT64_MIN) m.wrapped = true;
}

void batched_step(FuzzedDataProvider& in, world& w) {
  if (w.batched.empty() || in.ConsumeIntegralInRange<int>(0, 7) == 0) {
    if (in.ConsumeBool()) {
      const int mode = consume_mode(in);
      const std::int64_t batch = consume_batch(in);
      errno = 0;
      percpu_batched_counter* c = fuzz_batched_counter_create(mode, batch);
      const bool valid = known_mode(mode) && batch >= 0 && batch <= (std::int64_t{1} << 40);
      if (!valid) {
        FUZZ_CHECK_MSG(c == nullptr && errno == EINVAL, "mode %d batch %lld: %p errno %d", mode,
                       static_cast<long long>(batch), static_cast<void*>(c), errno);
      } else if (c == nullptr) {
        FUZZ_CHECK(errno == ENOMEM);
      } else if (w.batched.size() < kMaxLive) {
        w.batched.push_back({c, mode, batch});
      } else {
        percpu_batched_counter_destroy(c);
      }
      return;
    }
    percpu_batched_counter* bad = bad_handle<percpu_batched_counter>(in, w, kBatched);
    std::int64_t v = 7;
    int r = 7;
    FUZZ_CHECK(percpu_batched_counter_add(bad, 1) == -EINVAL);
    FUZZ_CHECK(percpu_batched_counter_read(bad, &v) == -EINVAL && v == 7);
    FUZZ_CHECK(percpu_batched_counter_sum(bad, &v) == -EINVAL && v == 7);
    FUZZ_CHECK(percpu_batched_counter_compare(bad, 0, &r) == -EINVAL && r == 7);
    FUZZ_CHECK(percpu_batched_counter_limited_add(bad, 1, 10) == -EINVAL);
    FUZZ_CHECK(percpu_batched_counter_error_bound(bad) == -EINVAL);
    percpu_batched_counter_destroy(bad);
    return;
  }
  const std::size_t i = pick(in, w.batched);
  batched_model& m = w.batched[i];
  const std::int64_t slots = g_slots[m.mode];
  const std::int64_t batch = m.batch != 0 ? m.batch : std::max<std::int64_t>(64, 2 * slots);
  const std::int64_t bound = (batch - 1) * (slots + 2);
  switch (in.ConsumeIntegralInRange<int>(0, 6)) {
    case 0: {
      const std::int64_t n = consume_amount(in);
      FUZZ_CHECK(percpu_batched_counter_add(m.h, n) == 0);
      batched_add(m, n);
      break;
    }
    case 1: {
      std::int64_t v = 0;
      FUZZ_CHECK(percpu_batched_counter_sum(m.h, &v) == 0);
      FUZZ_CHECK_MSG(v == m.value(), "sum %lld, model %lld", static_cast<long long>(v),
                     static_cast<long long>(m.value()));
      FUZZ_CHECK(percpu_batched_counter_sum(m.h, nullptr) == -EINVAL);
      break;
    }
    case 2: {
      std::int64_t v = 0;
      FUZZ_CHECK(percpu_batched_counter_read(m.h, &v) == 0);
      FUZZ_CHECK(percpu_batched_counter_read(m.h, nullptr) == -EINVAL);
      const __int128 off = static_cast<__int128>(v) - m.exact;
      FUZZ_CHECK_MSG(m.wrapped || (off <= bound && -off <= bound),
                     "read %lld, exact %lld, bound %lld", static_cast<long long>(v),
                     static_cast<long long>(m.exact), static_cast<long long>(bound));
      break;
    }
    case 3: {
      const std::int64_t x = in.ConsumeBool()
                                 ? near(m.value(), in.ConsumeIntegralInRange<std::int64_t>(-2, 2))
                                 : consume_amount(in);
      int r = 7;
      FUZZ_CHECK(percpu_batched_counter_compare(m.h, x, &r) == 0);
      FUZZ_CHECK(percpu_batched_counter_compare(m.h, x, nullptr) == -EINVAL);
      const int expected = m.exact < x ? -1 : m.exact > x ? 1 : 0;
      FUZZ_CHECK_MSG(m.wrapped || r == expected, "compare(%lld) = %d, exact %lld",
                     static_cast<long long>(x), r, static_cast<long long>(m.exact));
      break;
    }
    case 4: {
      const std::int64_t n = consume_amount(in);
      const std::int64_t limit =
          in.ConsumeBool() ? near(m.value(), in.ConsumeIntegralInRange<std::int64_t>(-3, 3) +
                                                 (n > 0 && n < (1 << 20) ? n : 0))
                           : consume_amount(in);
      const int r = percpu_batched_counter_limited_add(m.h, n, limit);
      if (r == -EOPNOTSUPP) break;  // no fence possible: nothing added
      FUZZ_CHECK(r == 0 || r == 1);
      if (!m.wrapped) {
        const bool fits = n <= 0 || m.exact + n <= limit;
        FUZZ_CHECK_MSG(r == (fits ? 1 : 0), "limited_add(%lld, %lld) = %d, exact %lld",
                       static_cast<long long>(n), static_cast<long long>(limit), r,
                       static_cast<long long>(m.exact));
      }
      if (r == 1) batched_add(m, n);
      break;
    }
    case 5:
      FUZZ_CHECK_MSG(percpu_batched_counter_error_bound(m.h) == bound, "bound %lld, model %lld",
                     static_cast<long long>(percpu_batched_counter_error_bound(m.h)),
                     static_cast<long long>(bound));
      break;
    default:
      percpu_batched_counter_destroy(m.h);
      w.batched.erase(w.batched.begin() + static_cast<std::ptrdiff_t>(i));
      break;
  }
}

// ---- Free list ------------------------------------------------------------------------------

// Takes a NULL-terminated chain returned by the list into the model (each node held by it,
// none twice).
void take_chain(freelist_model& m, percpu_freelist_node* n) {
  int seen = 0;
  for (; n != nullptr; n = n->next) {
    FUZZ_CHECK(++seen <= kNodes);
    const int k = node_index(n);
    FUZZ_CHECK_MSG(m.nodes.erase(k) == 1, "node %d came out of a list that did not hold it", k);
    FUZZ_CHECK(g_holder[k] == m.h);
    g_holder[k] = nullptr;
  }
}

// Everything the list holds, from every index: exactly the model's nodes.
void drain_all(freelist_model& m) {
  for (int index = 0; index < g_slots[m.mode]; ++index) {
    errno = 12345;
    percpu_freelist_node* chain = percpu_freelist_drain(m.h, index);
    if (chain == nullptr && errno == EOPNOTSUPP) return;  // no fence: nothing to conclude
    FUZZ_CHECK(chain != nullptr || errno == 0);
    take_chain(m, chain);
  }
  FUZZ_CHECK_MSG(m.nodes.empty(), "%zu nodes lost by the list", m.nodes.size());
}

void freelist_destroy(freelist_model& m) {
  percpu_freelist_destroy(m.h);
  for (int k : m.nodes) g_holder[k] = nullptr;
}

void freelist_step(FuzzedDataProvider& in, world& w) {
  if (w.lists.empty() || in.ConsumeIntegralInRange<int>(0, 7) == 0) {
    if (in.ConsumeBool()) {
      const int mode = consume_mode(in);
      const unsigned flags = in.ConsumeBool() ? in.ConsumeIntegralInRange<unsigned>(0, 1)
                                              : in.ConsumeIntegral<unsigned>();
      errno = 0;
      percpu_freelist* l = fuzz_freelist_create(mode, flags);
      if (!known_mode(mode) || flags > 1) {
        FUZZ_CHECK(l == nullptr && errno == EINVAL);
      } else if (l == nullptr) {
        FUZZ_CHECK(errno == ENOMEM);
      } else if (w.lists.size() < kMaxLive) {
        w.lists.push_back({l, mode, flags == PERCPU_FREELIST_CHECKED, {}});
        FUZZ_CHECK(percpu_freelist_slots(l) == g_slots[mode]);
      } else {
        percpu_freelist_destroy(l);
      }
      return;
    }
    percpu_freelist* bad = bad_handle<percpu_freelist>(in, w, kFreelist);
    FUZZ_CHECK(percpu_freelist_push(bad, &g_nodes[0]) == -EINVAL);
    EXPECT_NULL_ERRNO(percpu_freelist_pop(bad), EINVAL);
    EXPECT_NULL_ERRNO(percpu_freelist_pop_all(bad), EINVAL);
    EXPECT_NULL_ERRNO(percpu_freelist_drain(bad, 0), EINVAL);
    FUZZ_CHECK(percpu_freelist_slots(bad) == -EINVAL);
    percpu_freelist_destroy(bad);
    return;
  }
  const std::size_t i = pick(in, w.lists);
  freelist_model& m = w.lists[i];
  switch (in.ConsumeIntegralInRange<int>(0, 6)) {
    case 0:
    case 1: {  // push: a free node, or (checked lists) one a checked list holds
      const int k = in.ConsumeIntegralInRange<int>(0, kNodes - 1);
      if (g_holder[k] == nullptr) {
        FUZZ_CHECK(percpu_freelist_push(m.h, &g_nodes[k]) == 0);
        g_holder[k] = m.h;
        g_holder_checked[k] = m.checked;
        m.nodes.insert(k);
      } else if (m.checked && g_holder_checked[k]) {
        FUZZ_CHECK(percpu_freelist_push(m.h, &g_nodes[k]) == -EEXIST);
      }
      FUZZ_CHECK(percpu_freelist_push(m.h, nullptr) == -EINVAL);
      break;
    }
    case 2: {
      errno = 0;
      percpu_freelist_node* n = percpu_freelist_pop(m.h);
      FUZZ_CHECK(errno == 0);
      if (n != nullptr) n->next = nullptr;  // one node: the rest of its chain stays listed
      take_chain(m, n);
      break;
    }
    case 3:
      take_chain(m, percpu_freelist_pop_all(m.h));
      break;
    case 4: {
      const int slots = g_slots[m.mode];
      const int index = in.ConsumeBool() ? in.ConsumeIntegralInRange<int>(-2, slots + 2)
                                         : in.ConsumeIntegral<int>();
      errno = 12345;
      percpu_freelist_node* chain = percpu_freelist_drain(m.h, index);
      if (index < 0 || index >= slots) {
        FUZZ_CHECK_MSG(chain == nullptr && errno == ERANGE, "drain(%d): errno %d", index, errno);
      } else {
        FUZZ_CHECK(chain != nullptr ? errno == 0 : (errno == 0 || errno == EOPNOTSUPP));
        take_chain(m, chain);
      }
      break;
    }
    case 5:
      drain_all(m);
      break;
    default:
      if (in.ConsumeBool()) drain_all(m);
      freelist_destroy(m);
      w.lists.erase(w.lists.begin() + static_cast<std::ptrdiff_t>(i));
      break;
  }
}

// ---- Pool -----------------------------------------------------------------------------------

constexpr std::size_t kPage = 4096;
constexpr std::size_t kMaxStride = std::size_t{1} << 30;

// The bytes an allocation of `size` takes, as pool_base.h states it: rounded up to 8 up to 256
// bytes, to one of four sizes per doubling above (never beyond the stride).
std::size_t rounded(std::size_t size, std::size_t stride) {
  if (size <= 256) return (size + 7) & ~std::size_t{7};
  std::size_t low = 256;  // size in (low, 2 * low]
  while (size > 2 * low) low *= 2;
  const std::size_t step = low / 4;
  return std::min((size + step - 1) / step * step, stride);
}

// The slots the target reads and writes of an object: the first, the last and a few between.
std::vector<int> sample_slots(FuzzedDataProvider& in, int slots) {
  std::vector<int> out{0, slots - 1};
  for (int n = 0; n < 2; ++n) out.push_back(in.ConsumeIntegralInRange<int>(0, slots - 1));
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

void pool_step(FuzzedDataProvider& in, world& w) {
  if (w.pools.empty() || in.ConsumeIntegralInRange<int>(0, 7) == 0) {
    if (in.ConsumeBool()) {
      const int mode = consume_mode(in);
      std::size_t stride = 0;
      switch (in.ConsumeIntegralInRange<int>(0, 4)) {
        case 0:
          stride = 0;
          break;
        case 1:
          stride = kPage * in.ConsumeIntegralInRange<std::size_t>(1, 16);
          break;
        case 2:
          stride = kMaxStride + kPage * in.ConsumeIntegralInRange<std::size_t>(0, 1);
          break;
        case 3:
          stride = kPage * in.ConsumeIntegralInRange<std::size_t>(0, 2) +
                   in.ConsumeIntegralInRange<std::size_t>(0, 8) - 4;
          break;
        default:
          stride = in.ConsumeIntegral<std::size_t>();
      }
      const int space = known_mode(mode) ? g_slots[mode] : 1;
      int slots = 0;
      switch (in.ConsumeIntegralInRange<int>(0, 4)) {
        case 0:
          slots = 0;
          break;
        case 1:
          slots = space + in.ConsumeIntegralInRange<int>(-1, 6);
          break;
        case 2:
          slots = in.ConsumeIntegralInRange<int>(-3, -1);
          break;
        case 3:
          slots = INT_MAX - in.ConsumeIntegralInRange<int>(0, 1);
          break;
        default:
          slots = in.ConsumeIntegral<int>();
      }
      errno = 0;
      percpu_pool* p = fuzz_pool_create(mode, stride, slots);
      const bool refused = !known_mode(mode) || slots < 0 || (slots > 0 && slots < space) ||
                           (stride != 0 && (stride % kPage != 0 || stride > kMaxStride));
      if (refused) {
        FUZZ_CHECK_MSG(p == nullptr && errno == EINVAL, "pool(%d, %zu, %d): %p errno %d", mode,
                       stride, slots, static_cast<void*>(p), errno);
        return;
      }
      if (p == nullptr) {  // slots x stride beyond the address space, or no memory
        FUZZ_CHECK(errno == EINVAL || errno == ENOMEM);
        return;
      }
      const std::size_t expected_stride = stride != 0 ? stride : 64 * 1024;
      FUZZ_CHECK(percpu_pool_stride(p) == expected_stride);
      FUZZ_CHECK(percpu_pool_slots(p) == (slots != 0 ? slots : space));
      // Thousands of slots cost a page each per object touched: only small pools stay.
      if (w.pools.size() < kMaxLive && percpu_pool_slots(p) <= 256) {
        w.pools.push_back({p, mode, expected_stride, percpu_pool_slots(p), {}});
      } else {
        percpu_pool_destroy(p);
      }
      return;
    }
    percpu_pool* bad = bad_handle<percpu_pool>(in, w, kPool);
    EXPECT_NULL_ERRNO(percpu_pool_alloc(bad, 8), EINVAL);
    int local = 0;
    FUZZ_CHECK(percpu_pool_free(bad, &local, 8) == -EINVAL);
    FUZZ_CHECK(percpu_pool_stride(bad) == 0);
    FUZZ_CHECK(percpu_pool_slots(bad) == -EINVAL);
    percpu_pool_destroy(bad);
    return;
  }
  const std::size_t i = pick(in, w.pools);
  pool_model& m = w.pools[i];
  switch (in.ConsumeIntegralInRange<int>(0, 4)) {
    case 0:
    case 1: {  // allocate
      std::size_t size = 0;
      switch (in.ConsumeIntegralInRange<int>(0, 4)) {
        case 0:
          size = in.ConsumeIntegralInRange<std::size_t>(0, 300);
          break;
        case 1:
          size = in.ConsumeIntegralInRange<std::size_t>(1, m.stride);
          break;
        case 2:
          size = m.stride + in.ConsumeIntegralInRange<std::size_t>(0, 1);
          break;
        case 3:
          size = SIZE_MAX;
          break;
        default:
          size = in.ConsumeIntegral<std::size_t>();
      }
      errno = 0;
      char* p = static_cast<char*>(percpu_pool_alloc(m.h, size));
      if (size == 0 || size > m.stride) {
        FUZZ_CHECK_MSG(p == nullptr && errno == EINVAL, "alloc(%zu), stride %zu: errno %d", size,
                       m.stride, errno);
        break;
      }
      if (p == nullptr) {
        FUZZ_CHECK(errno == ENOMEM);
        break;
      }
      FUZZ_CHECK(reinterpret_cast<std::uintptr_t>(p) % 8 == 0);
      for (const auto& [q, qsize] : m.live)
        FUZZ_CHECK_MSG(p + size <= q || q + qsize <= p, "objects overlap: %p+%zu, %p+%zu",
                       static_cast<void*>(p), size, static_cast<void*>(q), qsize);
      for (const int s : sample_slots(in, m.slots)) {
        char* copy = static_cast<char*>(percpu_pool_slot(p, m.stride, s));
        FUZZ_CHECK_MSG(copy[0] == 0 && copy[size - 1] == 0, "slot %d of a new object not zero", s);
        copy[0] = 0x5a;  // a freed object must come back zeroed
        copy[size - 1] = 0x5a;
      }
      if (m.live.size() < 64) {
        m.live[p] = size;
      } else {
        FUZZ_CHECK(percpu_pool_free(m.h, p, size) == 0);
      }
      break;
    }
    case 2: {  // free: a live object (any size), a base never handed out, one of another pool
      int rc = 0;
      if (!m.live.empty() && in.ConsumeIntegralInRange<int>(0, 3) != 0) {
        auto it = m.live.begin();
        std::advance(it, static_cast<std::ptrdiff_t>(pick(in, m.live)));
        char* base = it->first;
        const std::size_t size = it->second;
        switch (in.ConsumeIntegralInRange<int>(0, 3)) {
          case 0: {  // the size allocated
            FUZZ_CHECK(percpu_pool_free(m.h, base, size) == 0);
            m.live.erase(it);
            break;
          }
          case 1: {  // another size: freed when it rounds as the allocation's did
            const std::size_t other = in.ConsumeIntegralInRange<std::size_t>(0, m.stride + 1);
            rc = percpu_pool_free(m.h, base, other);
            const bool same = other != 0 && other <= m.stride &&
                              rounded(other, m.stride) == rounded(size, m.stride);
            FUZZ_CHECK_MSG(rc == (same ? 0 : -EINVAL),
                           "free(%zu bytes) of a %zu-byte object (stride %zu): %d", other, size,
                           m.stride, rc);
            if (rc == 0) m.live.erase(it);
            break;
          }
          case 2: {  // inside the object: not a base
            const std::size_t off = in.ConsumeIntegralInRange<std::size_t>(1, 64);
            if (m.live.count(base + off) != 0) break;
            FUZZ_CHECK(percpu_pool_free(m.h, base + off, size) == -EINVAL);
            break;
          }
          default: {  // twice
            FUZZ_CHECK(percpu_pool_free(m.h, base, size) == 0);
            m.live.erase(it);
            FUZZ_CHECK(percpu_pool_free(m.h, base, size) == -EINVAL);
            break;
          }
        }
      } else if (w.pools.size() > 1 && in.ConsumeBool()) {  // another pool's object
        pool_model& other = w.pools[(i + 1) % w.pools.size()];
        if (!other.live.empty()) {
          const auto& [base, size] = *other.live.begin();
          if (m.live.count(base) == 0) FUZZ_CHECK(percpu_pool_free(m.h, base, size) == -EINVAL);
        }
      } else {
        int local = 0;
        FUZZ_CHECK(percpu_pool_free(m.h, &local, sizeof local) == -EINVAL);
        FUZZ_CHECK(percpu_pool_free(m.h, nullptr, 8) == 0);
      }
      break;
    }
    case 3:
      FUZZ_CHECK(percpu_pool_stride(m.h) == m.stride);
      FUZZ_CHECK(percpu_pool_slots(m.h) == m.slots);
      break;
    default:
      percpu_pool_destroy(m.h);
      w.pools.erase(w.pools.begin() + static_cast<std::ptrdiff_t>(i));
      break;
  }
}

// ---- Reader-writer semaphore ----------------------------------------------------------------

void rwsem_release(rwsem_model& m) {
  for (; m.readers > 0; --m.readers) FUZZ_CHECK(percpu_rwsem_up_read(m.h) == 0);
  if (m.writer) FUZZ_CHECK(percpu_rwsem_up_write(m.h) == 0);
  m.writer = false;
}

void rwsem_step(FuzzedDataProvider& in, world& w) {
  if (w.rwsems.empty() || in.ConsumeIntegralInRange<int>(0, 7) == 0) {
    if (in.ConsumeBool()) {
      const int mode = consume_mode(in);
      errno = 0;
      percpu_rwsem* s = fuzz_rwsem_create(mode);
      if (!known_mode(mode)) {
        FUZZ_CHECK(s == nullptr && errno == EINVAL);
      } else if (s == nullptr) {
        FUZZ_CHECK(errno == ENOMEM);
      } else if (w.rwsems.size() < kMaxLive) {
        w.rwsems.push_back({s});
      } else {
        percpu_rwsem_destroy(s);
      }
      return;
    }
    percpu_rwsem* bad = bad_handle<percpu_rwsem>(in, w, kRwsem);
    FUZZ_CHECK(percpu_rwsem_down_read(bad) == -EINVAL);
    FUZZ_CHECK(percpu_rwsem_down_read_trylock(bad) == -EINVAL);
    FUZZ_CHECK(percpu_rwsem_up_read(bad) == -EINVAL);
    FUZZ_CHECK(percpu_rwsem_down_write(bad) == -EINVAL);
    FUZZ_CHECK(percpu_rwsem_down_write_trylock(bad) == -EINVAL);
    FUZZ_CHECK(percpu_rwsem_up_write(bad) == -EINVAL);
    percpu_rwsem_destroy(bad);
    return;
  }
  const std::size_t i = pick(in, w.rwsems);
  rwsem_model& m = w.rwsems[i];
  switch (in.ConsumeIntegralInRange<int>(0, 6)) {
    case 0:  // down_read would wait for this thread's own write hold: not then
      if (!m.writer && m.readers < 8) {
        FUZZ_CHECK(percpu_rwsem_down_read(m.h) == 0);
        ++m.readers;
      }
      break;
    case 1: {
      const int r = percpu_rwsem_down_read_trylock(m.h);
      FUZZ_CHECK(r == (m.writer ? 0 : 1));
      if (r == 1) ++m.readers;
      break;
    }
    case 2:
      if (m.readers > 0) {
        FUZZ_CHECK(percpu_rwsem_up_read(m.h) == 0);
        --m.readers;
      }
      break;
    case 3:  // down_write would wait for this thread's own holds: only when it holds none
      if (m.readers == 0 && !m.writer) {
        const int r = percpu_rwsem_down_write(m.h);
        FUZZ_CHECK(r == 0 || r == -EOPNOTSUPP);
        m.writer = r == 0;
      }
      break;
    case 4: {
      const int r = percpu_rwsem_down_write_trylock(m.h);
      if (r == -EOPNOTSUPP) break;
      FUZZ_CHECK_MSG(r == (m.readers == 0 && !m.writer ? 1 : 0),
                     "down_write_trylock: %d with %d readers, writer %d", r, m.readers, m.writer);
      if (r == 1) m.writer = true;
      break;
    }
    case 5:
      if (m.writer) {
        FUZZ_CHECK(percpu_rwsem_up_write(m.h) == 0);
        m.writer = false;
      }
      break;
    default:  // nobody may hold it then
      rwsem_release(m);
      percpu_rwsem_destroy(m.h);
      w.rwsems.erase(w.rwsems.begin() + static_cast<std::ptrdiff_t>(i));
      break;
  }
}

// ---- Reference count ------------------------------------------------------------------------

void on_release(percpu_ref* r, void* arg) {
  auto* m = static_cast<ref_model*>(arg);
  FUZZ_CHECK(r == m->h);
  FUZZ_CHECK(m->has_release);
  ++m->releases;
  FUZZ_CHECK_MSG(m->releases == 1, "release callback ran %d times", m->releases);
  if (m->destroy_in_release) {
    percpu_ref_destroy(r);
    m->gone = true;
  }
}

// After a put or a kill: the callback ran exactly when the count reached zero after kill.
void ref_after_drop(ref_model& m) {
  if (m.state == ref_model::dying && m.extra == 0) m.state = ref_model::released;
  if (m.has_release) FUZZ_CHECK(m.releases == (m.state == ref_model::released ? 1 : 0));
}

void ref_step(FuzzedDataProvider& in, world& w) {
  if (w.refs.empty() || in.ConsumeIntegralInRange<int>(0, 7) == 0) {
    if (in.ConsumeBool()) {
      const int mode = consume_mode(in);
      auto m = std::make_unique<ref_model>();
      m->has_release = in.ConsumeIntegralInRange<int>(0, 3) != 0;
      m->destroy_in_release = m->has_release && in.ConsumeBool();
      errno = 0;
      percpu_ref* r = fuzz_ref_create(mode, m->has_release ? on_release : nullptr, m.get());
      if (!known_mode(mode)) {
        FUZZ_CHECK(r == nullptr && errno == EINVAL);
      } else if (r == nullptr) {
        FUZZ_CHECK(errno == ENOMEM);
      } else if (w.refs.size() < kMaxLive) {
        m->h = r;
        FUZZ_CHECK(percpu_ref_is_dying(r) == 0 && percpu_ref_is_zero(r) == 0);
        w.refs.push_back(std::move(m));
      } else {
        percpu_ref_destroy(r);
      }
      return;
    }
    percpu_ref* bad = bad_handle<percpu_ref>(in, w, kRef);
    FUZZ_CHECK(percpu_ref_get(bad) == -EINVAL);
    FUZZ_CHECK(percpu_ref_tryget(bad) == -EINVAL);
    FUZZ_CHECK(percpu_ref_tryget_live(bad) == -EINVAL);
    FUZZ_CHECK(percpu_ref_put(bad) == -EINVAL);
    FUZZ_CHECK(percpu_ref_kill(bad) == -EINVAL);
    FUZZ_CHECK(percpu_ref_resurrect(bad) == -EINVAL);
    FUZZ_CHECK(percpu_ref_is_zero(bad) == -EINVAL);
    FUZZ_CHECK(percpu_ref_is_dying(bad) == -EINVAL);
    percpu_ref_destroy(bad);
    return;
  }
  const std::size_t i = pick(in, w.refs);
  ref_model& m = *w.refs[i];
  switch (in.ConsumeIntegralInRange<int>(0, 8)) {
    case 0:  // get: while not released (the contract's precondition)
      if (m.state != ref_model::released && m.extra < 1000) {
        FUZZ_CHECK(percpu_ref_get(m.h) == 0);
        ++m.extra;
      }
      break;
    case 1: {
      const int r = percpu_ref_tryget(m.h);
      FUZZ_CHECK(r == (m.state != ref_model::released ? 1 : 0));
      m.extra += r;
      break;
    }
    case 2: {
      const int r = percpu_ref_tryget_live(m.h);
      FUZZ_CHECK(r == (m.state == ref_model::live ? 1 : 0));
      m.extra += r;
      break;
    }
    case 3:  // put: only a reference taken
      if (m.extra > 0) {
        --m.extra;
        FUZZ_CHECK(percpu_ref_put(m.h) == 0);
        ref_after_drop(m);
      }
      break;
    case 4: {
      const int r = percpu_ref_kill(m.h);
      if (m.state != ref_model::live) {
        FUZZ_CHECK_MSG(r == -EINVAL, "kill of a killed ref: %d", r);
        break;
      }
      if (r == -EOPNOTSUPP) break;  // no fence: nothing changed
      FUZZ_CHECK(r == 0);
      m.state = ref_model::dying;
      ref_after_drop(m);
      break;
    }
    case 5: {
      const int r = percpu_ref_resurrect(m.h);
      if (m.state != ref_model::dying) {
        FUZZ_CHECK_MSG(r == -EINVAL, "resurrect of a live or released ref: %d", r);
        break;
      }
      FUZZ_CHECK(r == 0);
      m.state = ref_model::live;
      break;
    }
    case 6:
      FUZZ_CHECK(percpu_ref_is_zero(m.h) == (m.state == ref_model::released ? 1 : 0));
      FUZZ_CHECK(percpu_ref_is_dying(m.h) == (m.state != ref_model::live ? 1 : 0));
      break;
    case 7:  // drop every reference taken, then kill: the release runs
      for (; m.extra > 0 && !m.gone;) {
        --m.extra;
        FUZZ_CHECK(percpu_ref_put(m.h) == 0);
        ref_after_drop(m);
      }
      if (!m.gone && m.state == ref_model::live && percpu_ref_kill(m.h) == 0) {
        m.state = ref_model::dying;
        ref_after_drop(m);
      }
      break;
    default:
      percpu_ref_destroy(m.h);  // no callback
      FUZZ_CHECK(!m.has_release || m.releases == (m.state == ref_model::released ? 1 : 0));
      m.gone = true;
      break;
  }
  if (m.gone) w.refs.erase(w.refs.begin() + static_cast<std::ptrdiff_t>(i));
}

// ---- Histogram and snapshots ----------------------------------------------------------------

std::optional<percpu::histogram_layout> layout_for(std::uint64_t max_value, int precision) {
  if (precision < -1) return std::nullopt;
  try {
    return percpu::histogram_layout(
        precision < 0 ? percpu::histogram_layout::kDefaultPrecisionBits : precision,
        max_value != 0 ? max_value : percpu::histogram_layout::kDefaultMaxValue);
  } catch (const std::invalid_argument&) {
    return std::nullopt;
  }
}

void check_snapshot(FuzzedDataProvider& in, const snapshot_model& m) {
  const percpu::histogram_layout& l = m.layout;
  std::uint64_t sum = 0, above = 0;
  for (std::uint64_t v : m.values) {
    sum += v;
    above += v > l.max_value() ? 1 : 0;
  }
  FUZZ_CHECK(percpu_histogram_snapshot_count(m.h) == m.values.size());
  FUZZ_CHECK(percpu_histogram_snapshot_sum(m.h) == sum);
  FUZZ_CHECK(percpu_histogram_snapshot_above_range(m.h) == above);
  std::vector<std::uint64_t> sorted = m.values;
  std::sort(sorted.begin(), sorted.end());
  FUZZ_CHECK(percpu_histogram_snapshot_min(m.h) ==
             (sorted.empty() ? 0 : l.lowest(l.index_of(sorted.front()))));
  FUZZ_CHECK(percpu_histogram_snapshot_max(m.h) ==
             (sorted.empty() ? 0 : l.highest(l.index_of(sorted.back()))));
  const std::uint64_t v = in.ConsumeBool() && !sorted.empty()
                              ? sorted[pick(in, sorted)] + in.ConsumeIntegralInRange<int>(0, 2) - 1
                              : in.ConsumeIntegral<std::uint64_t>();
  std::uint64_t at_or_below = 0;
  for (std::uint64_t x : m.values)
    if (l.highest(l.index_of(x)) <= v && (x <= l.max_value() || v == UINT64_MAX)) ++at_or_below;
  FUZZ_CHECK(percpu_histogram_snapshot_count_at_or_below(m.h, v) == at_or_below);
  const double q =
      in.ConsumeBool() ? in.ConsumeProbability<double>() : in.ConsumeFloatingPoint<double>();
  std::uint64_t value = 7;
  const int r = percpu_histogram_snapshot_value_at_quantile(m.h, q, &value);
  FUZZ_CHECK(percpu_histogram_snapshot_value_at_quantile(m.h, 0.5, nullptr) == -EINVAL);
  if (!(q >= 0.0 && q <= 1.0)) {
    FUZZ_CHECK(r == -EINVAL && value == 7);
    return;
  }
  FUZZ_CHECK(r == 0);
  if (sorted.empty()) {
    FUZZ_CHECK(value == 0);
    return;
  }
  // Rank ceil(q' * count), q' one double step below q, within [1, count].
  const double below = std::max(0.0, std::nextafter(q, -1.0));
  std::uint64_t rank = static_cast<std::uint64_t>(std::ceil(below * sorted.size()));
  rank = std::min<std::uint64_t>(std::max<std::uint64_t>(rank, 1), sorted.size());
  FUZZ_CHECK(value == l.highest(l.index_of(sorted[rank - 1])));
}

void histogram_step(FuzzedDataProvider& in, world& w) {
  if (w.histograms.empty() || in.ConsumeIntegralInRange<int>(0, 7) == 0) {
    if (in.ConsumeBool()) {
      const int mode = consume_mode(in);
      const std::uint64_t max_value = in.ConsumeBool()
                                          ? in.ConsumeIntegralInRange<std::uint64_t>(0, 100000)
                                          : in.ConsumeIntegral<std::uint64_t>();
      const int precision =
          in.ConsumeBool() ? in.ConsumeIntegralInRange<int>(-3, 16) : in.ConsumeIntegral<int>();
      const std::optional<percpu::histogram_layout> layout = layout_for(max_value, precision);
      errno = 0;
      percpu_histogram* h = fuzz_histogram_create(mode, max_value, precision);
      if (!known_mode(mode) || !layout) {
        FUZZ_CHECK_MSG(h == nullptr && errno == EINVAL, "histogram(%d, %llu, %d): errno %d", mode,
                       static_cast<unsigned long long>(max_value), precision, errno);
      } else if (h == nullptr) {
        FUZZ_CHECK(errno == ENOMEM);
      } else if (w.histograms.size() < kMaxLive) {
        w.histograms.push_back({h, *layout, {}});
      } else {
        percpu_histogram_destroy(h);
      }
      return;
    }
    percpu_histogram* bad = bad_handle<percpu_histogram>(in, w, kHistogram);
    FUZZ_CHECK(percpu_histogram_record(bad, 1) == -EINVAL);
    EXPECT_NULL_ERRNO(percpu_histogram_snapshot_take(bad, 0), EINVAL);
    EXPECT_NULL_ERRNO(percpu_histogram_snapshot_take(bad, 1), EINVAL);
    percpu_histogram_destroy(bad);
    return;
  }
  const std::size_t i = pick(in, w.histograms);
  histogram_model& m = w.histograms[i];
  switch (in.ConsumeIntegralInRange<int>(0, 3)) {
    case 0:
    case 1: {
      const std::uint64_t v =
          in.ConsumeBool() ? in.ConsumeIntegralInRange<std::uint64_t>(0, m.layout.max_value() + 2)
                           : in.ConsumeIntegral<std::uint64_t>();
      if (m.values.size() >= 256) break;
      FUZZ_CHECK(percpu_histogram_record(m.h, v) == 0);
      m.values.push_back(v);
      break;
    }
    case 2: {
      const bool reset = in.ConsumeBool();
      errno = 0;
      percpu_histogram_snapshot* s = percpu_histogram_snapshot_take(m.h, reset ? 1 : 0);
      if (s == nullptr) {
        FUZZ_CHECK(errno == EOPNOTSUPP || errno == ENOMEM);
        break;
      }
      snapshot_model sm{s, m.layout, m.values};
      if (reset) m.values.clear();
      check_snapshot(in, sm);
      if (w.snapshots.size() < kMaxLive) {
        w.snapshots.push_back(std::move(sm));
      } else {
        percpu_histogram_snapshot_destroy(s);
      }
      break;
    }
    default:  // its snapshots stay valid
      percpu_histogram_destroy(m.h);
      w.histograms.erase(w.histograms.begin() + static_cast<std::ptrdiff_t>(i));
      break;
  }
}

void snapshot_step(FuzzedDataProvider& in, world& w) {
  if (w.snapshots.empty() || in.ConsumeIntegralInRange<int>(0, 3) == 0) {
    percpu_histogram_snapshot* bad = bad_handle<percpu_histogram_snapshot>(in, w, kSnapshot);
    std::uint64_t v = 7;
    FUZZ_CHECK(percpu_histogram_snapshot_count(bad) == 0);
    FUZZ_CHECK(percpu_histogram_snapshot_sum(bad) == 0);
    FUZZ_CHECK(percpu_histogram_snapshot_above_range(bad) == 0);
    FUZZ_CHECK(percpu_histogram_snapshot_min(bad) == 0);
    FUZZ_CHECK(percpu_histogram_snapshot_max(bad) == 0);
    FUZZ_CHECK(percpu_histogram_snapshot_count_at_or_below(bad, UINT64_MAX) == 0);
    FUZZ_CHECK(percpu_histogram_snapshot_value_at_quantile(bad, 0.5, &v) == -EINVAL && v == 7);
    percpu_histogram_snapshot_destroy(bad);
    return;
  }
  const std::size_t i = pick(in, w.snapshots);
  if (in.ConsumeBool()) {
    check_snapshot(in, w.snapshots[i]);
  } else {
    percpu_histogram_snapshot_destroy(w.snapshots[i].h);
    w.snapshots.erase(w.snapshots.begin() + static_cast<std::ptrdiff_t>(i));
  }
}

// ---- The rest -------------------------------------------------------------------------------

void misc_step(FuzzedDataProvider& in) {
  switch (in.ConsumeIntegralInRange<int>(0, 2)) {
    case 0: {
      FUZZ_CHECK(percpu_info(nullptr) == -EINVAL);
      struct percpu_info info;
      FUZZ_CHECK(percpu_info(&info) == 0);
      FUZZ_CHECK(info.cpu_id_bound == g_slots[PERCPU_CPU_ID] &&
                 info.mm_cid_bound == g_slots[PERCPU_MM_CID]);
      FUZZ_CHECK(std::memchr(info.fallback_reason, '\0', sizeof info.fallback_reason) != nullptr);
      FUZZ_CHECK(std::memchr(info.glibc_reason, '\0', sizeof info.glibc_reason) != nullptr);
      break;
    }
    case 1: {
      const int cpu = percpu_current_cpu(), cid = percpu_current_mm_cid();
      FUZZ_CHECK(cpu >= 0 && cpu < g_slots[PERCPU_CPU_ID]);
      FUZZ_CHECK(cid >= 0 && cid < g_slots[PERCPU_MM_CID]);
      FUZZ_CHECK(percpu_current_node() >= 0);
      break;
    }
    default: {
      const percpu_cpu_node pair = percpu_current_cpu_node();
      FUZZ_CHECK(pair.cpu >= 0 && pair.cpu < g_slots[PERCPU_CPU_ID] && pair.node >= 0);
      break;
    }
  }
}

void destroy_all(world& w) {
  for (auto& m : w.counters) percpu_counter_destroy(m.h);
  for (auto& m : w.batched) percpu_batched_counter_destroy(m.h);
  for (auto& m : w.lists) {
    drain_all(m);
    freelist_destroy(m);
  }
  for (auto& m : w.pools) percpu_pool_destroy(m.h);
  for (auto& m : w.rwsems) {
    rwsem_release(m);
    percpu_rwsem_destroy(m.h);
  }
  for (auto& m : w.refs) percpu_ref_destroy(m->h);
  for (auto& m : w.histograms) percpu_histogram_destroy(m.h);
  for (auto& m : w.snapshots) percpu_histogram_snapshot_destroy(m.h);
  for (int k = 0; k < kNodes; ++k) FUZZ_CHECK(g_holder[k] == nullptr);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  struct percpu_info info;
  FUZZ_CHECK(percpu_info(&info) == 0);
  g_slots[PERCPU_CPU_ID] = info.cpu_id_bound;
  g_slots[PERCPU_MM_CID] = info.mm_cid_bound;
  FUZZ_CHECK(g_slots[0] >= 1 && g_slots[1] >= 1);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzedDataProvider in(data, size);
  world w;
  for (int step = 0; step < 200 && in.remaining_bytes() > 0; ++step) {
    switch (in.ConsumeIntegralInRange<int>(0, kKinds)) {
      case kCounter:
        counter_step(in, w);
        break;
      case kBatched:
        batched_step(in, w);
        break;
      case kFreelist:
        freelist_step(in, w);
        break;
      case kPool:
        pool_step(in, w);
        break;
      case kRwsem:
        rwsem_step(in, w);
        break;
      case kRef:
        ref_step(in, w);
        break;
      case kHistogram:
        histogram_step(in, w);
        break;
      case kSnapshot:
        snapshot_step(in, w);
        break;
      default:
        misc_step(in);
        break;
    }
  }
  destroy_all(w);
  return 0;
}
