// The per-CPU pool's slow paths: chunks reserved in groups, carving, the central lists, clearing
// freed objects without populating slots nobody touched, the debug checks, and the statistics.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/sysinfo.h>
#include <unistd.h>

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstdio>
#include <cstring>
#include <exception>
#include <set>
#include <stdexcept>
#include <string>

#include "fork_order.h"
#include "percpu/pool.h"
#include "percpu/tsan.h"
#include "residency.h"

namespace percpu {
using detail::forget_pagemap_in_child;
using detail::page_size;
using detail::page_states;
using detail::resident_bytes_of;
using detail::resident_bytes_windowed;

namespace {

constexpr unsigned char kPoison = 0xA5;
// A chunk with at most this many pages has its residency read in one call; a larger one is
// read only over the pages of the objects being cleared, slot by slot.
constexpr std::size_t kWholeChunkPages = 8192;

// True when all `bytes` (a multiple of 8, at an 8-byte-aligned address) at `p` equal `fill`.
bool holds_only(const char* p, std::size_t bytes, unsigned char fill) {
  const std::uint64_t pattern = std::uint64_t{fill} * 0x0101010101010101u;
  for (std::size_t i = 0; i < bytes; i += 8) {
    std::uint64_t word;
    std::memcpy(&word, p + i, 8);
    if (word != pattern) return false;
  }
  return true;
}

// Calls f(piece, length) for each run of an object's bytes, slot by slot, that lies on a page
// the written map marks: only those bytes may hold data, and touching any other byte would
// populate its page. `first_bit` is the map bit of the chunk's page 0.
template <class F>
void for_each_written_piece(const unsigned char* written, std::size_t first_bit, const char* chunk,
                            char* object, std::size_t bytes, int slots, std::size_t stride,
                            unsigned page_shift, F&& f) {
  for (int s = 0; s < slots; ++s) {
    char* slot = object + static_cast<std::size_t>(s) * stride;
    char* const end = slot + bytes;
    for (char* q = slot; q < end;) {
      const std::size_t page = static_cast<std::size_t>(q - chunk) >> page_shift;
      char* const piece_end = std::min(end, const_cast<char*>(chunk) + ((page + 1) << page_shift));
      const std::size_t bit = first_bit + page;
      if ((__atomic_load_n(&written[bit / 8], __ATOMIC_RELAXED) >> (bit % 8)) & 1)
        f(q, static_cast<std::size_t>(piece_end - q));
      q = piece_end;
    }
  }
}

int index_space_of(index_mode mode) {
  return mode == index_mode::cpu_id ? index_space<index_mode::cpu_id>()
                                    : index_space<index_mode::mm_cid>();
}

// Objects are at most a stride big; above 1 GiB, asking the kernel about a freed object's pages
// would take seconds.
constexpr std::size_t kMaxStride = std::size_t{1} << 30;

std::size_t checked_stride(std::size_t stride) {
  if (stride == 0 || stride % page_size() != 0 || stride > kMaxStride)
    throw std::invalid_argument("percpu::pool: stride " + std::to_string(stride) +
                                " is not a multiple of the page size " +
                                std::to_string(page_size()) + " in (0, 1 GiB]");
  return stride;
}

int checked_slots(index_mode mode, int slots, std::size_t stride) {
  const int space = index_space_of(mode);
  if (slots < space)
    throw std::invalid_argument("percpu::pool: " + std::to_string(slots) +
                                " slots is fewer than the index space (" + std::to_string(space) +
                                ")");
  if (stride > (std::size_t{1} << 46) / static_cast<std::size_t>(slots))
    throw std::invalid_argument("percpu::pool: slots x stride exceeds the address space");
  return slots;
}

std::string address(const void* p) {
  char text[32];
  std::snprintf(text, sizeof text, "%p", p);
  return text;
}

// Every live pool, for the fork handlers.
std::mutex g_pools_mutex;
std::set<pool_base*>& live_pools() {
  static auto* pools = new std::set<pool_base*>;  // never destroyed: pools may outlive statics
  return *pools;
}

}  // namespace

void pool_base::lock_all_for_fork() noexcept {
  g_pools_mutex.lock();
  for (pool_base* p : live_pools()) p->mutex_.lock();
}

void pool_base::unlock_all_after_fork() noexcept {
  for (pool_base* p : live_pools()) p->mutex_.unlock();
  g_pools_mutex.unlock();
}

void pool_base::unlock_all_in_child() noexcept {
  forget_pagemap_in_child();
  unlock_all_after_fork();
}

// Bytes of the written map of `chunks` chunks: a bit per page.
std::size_t pool_base::written_bytes(std::size_t chunks) const noexcept {
  return (chunks * (chunk_bytes_ / page_size()) + 7) / 8;
}

pool_base::pool_base(index_mode mode, int slots, const pool_options& options)
    : mode_(mode),
      stride_(checked_stride(options.stride)),
      slots_(checked_slots(mode, slots, stride_)),
      debug_(options.debug),
      chunk_bytes_(static_cast<std::size_t>(slots_) * stride_),
      page_shift_(static_cast<unsigned>(std::countr_zero(page_size()))),
      span_shift_(static_cast<unsigned>(std::bit_width(chunk_bytes_ - 1))),
      units_(stride_ / kGranule),
      caches_(index_space_of(mode),
              kCachedClasses * 2 * (1 + kCacheDepth) * sizeof(std::intptr_t)) {
  detail::set_fork_handlers(detail::fork_stage::pools, lock_all_for_fork, unlock_all_after_fork,
                            unlock_all_in_child);  // the first pool's call counts
  std::lock_guard<std::mutex> lock(g_pools_mutex);
  live_pools().insert(this);
}

pool_base::~pool_base() {
  {
    std::lock_guard<std::mutex> lock(g_pools_mutex);
    live_pools().erase(this);
  }
  for (int g = 0; g < ngroups_.load(std::memory_order_relaxed); ++g) {
    munmap(groups_[g].base, groups_[g].chunks << span_shift_);
    munmap(groups_[g].codes, groups_[g].chunks * units_ + written_bytes(groups_[g].chunks));
  }
}

// Reserves the next group: twice the chunks of the last one, fewer if the address space is
// short. The bookkeeping table is reserved with it; both populate only where touched.
void pool_base::add_group() {
  const int g = ngroups_.load(std::memory_order_relaxed);
  if (g == kMaxGroups) throw std::bad_alloc();
  std::size_t chunks = std::size_t{1} << std::min<unsigned>(g, 47 - span_shift_);
  void* base = MAP_FAILED;
  for (; chunks > 0; chunks /= 2) {
    base = mmap(nullptr, chunks << span_shift_, PROT_READ | PROT_WRITE,
                MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (base != MAP_FAILED) break;
  }
  if (base == MAP_FAILED) throw std::bad_alloc();
  // A huge page would populate 2 MiB of slots at the first touch of one of them.
  madvise(base, chunks << span_shift_, MADV_NOHUGEPAGE);
  void* codes = mmap(nullptr, chunks * units_ + written_bytes(chunks), PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (codes == MAP_FAILED) {
    munmap(base, chunks << span_shift_);
    throw std::bad_alloc();
  }
  auto* table = static_cast<unsigned char*>(codes);
  groups_[g] = group{static_cast<char*>(base), chunks, table, table + chunks * units_};
  ngroups_.store(g + 1, std::memory_order_release);
  chunk_ = 0;
  bump_ = 0;
}

// A never-used object of `bytes` from the current chunk's slot-0 space (its slots read as zero).
// When it does not fit, the chunk's tail goes to the small classes and carving moves on.
char* pool_base::carve(std::size_t bytes) {
  if (ngroups_.load(std::memory_order_relaxed) == 0) add_group();
  const group* gr = &groups_[ngroups_.load(std::memory_order_relaxed) - 1];
  if (bump_ + bytes > stride_) {
    char* chunk = gr->base + (chunk_ << span_shift_);
    while (stride_ - bump_ >= kGranule) {
      const std::size_t piece = std::min(stride_ - bump_, kCachedMaxBytes);
      central_[piece / kGranule - 1].push_back(chunk + bump_);
      bump_ += piece;
      ++carved_;
    }
    if (chunk_ + 1 == gr->chunks) {
      add_group();  // moves to its chunk 0; if it throws, nothing moved (the tail is carved)
      gr = &groups_[ngroups_.load(std::memory_order_relaxed) - 1];
    } else {
      ++chunk_;
      bump_ = 0;
    }
  }
  char* p = gr->base + (chunk_ << span_shift_) + bump_;
  bump_ += bytes;
  ++carved_;
  return p;
}

// A chunk and where its pages' bits are in its group's written map.
struct pool_base::chunk_ref {
  const group* gr = nullptr;
  char* base = nullptr;
  std::size_t first_bit = 0;  // bit of the chunk's page 0
};

pool_base::chunk_ref pool_base::chunk_of(const char* p) const noexcept {
  const auto addr = reinterpret_cast<std::uintptr_t>(p);
  const std::size_t chunk_pages = chunk_bytes_ >> page_shift_;
  for (int g = 0; g < ngroups_.load(std::memory_order_acquire); ++g) {
    const std::uintptr_t off = addr - reinterpret_cast<std::uintptr_t>(groups_[g].base);
    if (off >= (groups_[g].chunks << span_shift_)) continue;
    const std::size_t c = off >> span_shift_;
    return chunk_ref{&groups_[g], groups_[g].base + (c << span_shift_), c * chunk_pages};
  }
  return chunk_ref{};
}

// Makes sure the written map knows, for pages [lo, hi] of slot 0 and the same pages of every
// other slot, whether they may hold data; returns true when it asked the kernel. A page once
// written stays so (the pool never discards pages), so only pages not yet marked are asked about,
// and the kernel is asked only when some are: one query for a small chunk, one per slot range for a
// large one.
bool pool_base::learn_written(const chunk_ref& c, std::size_t lo, std::size_t hi) {
  const std::size_t page = page_size();
  const std::size_t chunk_pages = chunk_bytes_ / page;
  const std::size_t slot_pages = stride_ / page;
  auto known = [&](std::size_t pg) {
    const std::size_t bit = c.first_bit + pg;
    return (__atomic_load_n(&c.gr->written[bit / 8], __ATOMIC_RELAXED) >> (bit % 8)) & 1;
  };
  auto learn = [&](std::size_t first, std::size_t pages) {
    std::vector<unsigned char> states(pages);
    page_states(c.base + first * page, pages, states.data());
    for (std::size_t i = 0; i < pages; ++i) {
      const std::size_t bit = c.first_bit + first + i;
      if (states[i])  // atomic: batches are cleared outside the mutex, concurrently
        __atomic_fetch_or(&c.gr->written[bit / 8], static_cast<unsigned char>(1u << (bit % 8)),
                          __ATOMIC_RELAXED);
    }
  };
  bool unknown = false;
  for (int s = 0; s < slots_ && !unknown; ++s)
    for (std::size_t pg = lo; pg <= hi && !unknown; ++pg)
      unknown = !known(pg + static_cast<std::size_t>(s) * slot_pages);
  if (!unknown) return false;
  if (chunk_pages <= kWholeChunkPages) {
    learn(0, chunk_pages);
  } else {
    for (int s = 0; s < slots_; ++s)
      learn(lo + static_cast<std::size_t>(s) * slot_pages, hi - lo + 1);
  }
  return true;
}

// Fills every slot of each object (all of `bytes`, all in this pool) that may hold data with
// `fill`, writing only where the bytes differ; slots on pages never touched are left alone,
// so they stay unpopulated. The kernel is asked at most once per small chunk per batch; objects
// of large chunks are sorted and asked about per run of objects in one chunk.
void pool_base::clear_batch(std::vector<char*>& objects, std::size_t bytes, unsigned char fill) {
  auto clear = [&](const chunk_ref& c, char* object) {
    for_each_written_piece(c.gr->written, c.first_bit, c.base, object, bytes, slots_, stride_,
                           page_shift_, [&](char* piece, std::size_t n) {
                             if (!holds_only(piece, n, fill)) std::memset(piece, fill, n);
                           });
  };
  auto page_of = [&](const chunk_ref& c, const char* p) {
    return static_cast<std::size_t>(p - c.base) >> page_shift_;
  };
  if ((chunk_bytes_ >> page_shift_) <= kWholeChunkPages) {
    chunk_ref last;            // objects come mostly in runs from one chunk
    std::vector<char*> asked;  // chunks asked about in this batch: the rest of theirs is untouched
    for (char* object : objects) {
      const std::uintptr_t off =
          reinterpret_cast<std::uintptr_t>(object) - reinterpret_cast<std::uintptr_t>(last.base);
      if (last.gr == nullptr || off >= chunk_bytes_) last = chunk_of(object);
      // Once the kernel was asked about a chunk, pages it did not report as written are not:
      // this batch's objects were freed before it began, so none is written any more.
      if (std::find(asked.begin(), asked.end(), last.base) == asked.end() &&
          learn_written(last, page_of(last, object), page_of(last, object + bytes - 1)))
        asked.push_back(last.base);
      clear(last, object);
    }
    return;
  }
  std::sort(objects.begin(), objects.end());
  for (std::size_t i = 0; i < objects.size();) {
    const chunk_ref c = chunk_of(objects[i]);
    std::size_t j = i;
    while (j < objects.size() && chunk_of(objects[j]).base == c.base) ++j;
    learn_written(c, page_of(c, objects[i]), page_of(c, objects[j - 1] + bytes - 1));
    for (std::size_t k = i; k < j; ++k) clear(c, objects[k]);
    i = j;
  }
}

// Debug mode: a freed object holds, in each slot that may hold data, all zeros (it was zero
// when freed) or all poison. Anything else was written after the free: the object is withdrawn
// and the allocation fails with the fault named.
void pool_base::check_poison(char* p, std::size_t bytes) {
  const chunk_ref c = chunk_of(p);
  const std::size_t page = page_size();
  learn_written(c, static_cast<std::size_t>(p - c.base) / page,
                static_cast<std::size_t>(p + bytes - 1 - c.base) / page);
  // Each written piece was all zero or all poison when freed (pieces on pages written since then
  // by neighbours were never touched: zero).
  bool intact = true;
  for_each_written_piece(c.gr->written, c.first_bit, c.base, p, bytes, slots_, stride_, page_shift_,
                         [&](char* piece, std::size_t n) {
                           intact =
                               intact && (holds_only(piece, n, 0) || holds_only(piece, n, kPoison));
                         });
  if (intact) return;
  *code_of(p) = kQuarantinedCode;
  ++quarantined_;
  throw std::logic_error("percpu::pool: the free object at " + address(p) +
                         " was written after it was freed; it is withdrawn from use");
}

std::size_t pool_base::cache_pop_many(std::size_t cls, int which, char** out,
                                      std::size_t want) noexcept {
  auto words = [&](int index) { return cache_words(index, cls, which); };
  auto* values = reinterpret_cast<std::intptr_t*>(out);
  return mode_ == index_mode::cpu_id
             ? detail::stack_pop_many<index_mode::cpu_id>(words, values, want)
             : detail::stack_pop_many<index_mode::mm_cid>(words, values, want);
}

std::size_t pool_base::cache_push_many(std::size_t cls, int which, char* const* p,
                                       std::size_t n) noexcept {
  auto words = [&](int index) { return cache_words(index, cls, which); };
  const auto* values = reinterpret_cast<const std::intptr_t*>(p);
  return mode_ == index_mode::cpu_id
             ? detail::stack_push_many<index_mode::cpu_id>(words, kCacheDepth, values, n)
             : detail::stack_push_many<index_mode::mm_cid>(words, kCacheDepth, values, n);
}

// Debug mode: checks the poison of a freed object about to be handed out, then zeroes it.
void pool_base::reuse_poisoned(char* p, std::size_t bytes) {
  check_poison(p, bytes);
  batch_.assign(1, p);
  clear_batch(batch_, bytes, 0);
}

// Moves the calling thread's dirty stack of `cls` to the dirty list of its index, and returns
// that list. Lists are kept by index so that an object stays with the CPU that used it last:
// objects and their bookkeeping bytes then share no cache line with another CPU's.
std::vector<char*>& pool_base::collect_dirty(std::size_t cls) {
  std::vector<std::vector<char*>>& lists = dirty_[cls];
  if (lists.empty()) lists.resize(static_cast<std::size_t>(caches_.size()));
  const int index = mode_ == index_mode::cpu_id ? current_index<index_mode::cpu_id>()
                                                : current_index<index_mode::mm_cid>();
  std::vector<char*>& dirty = lists[static_cast<std::size_t>(index)];
  const std::size_t had = dirty.size();
  dirty.resize(had + kCacheDepth);
  dirty.resize(had + cache_pop_many(cls, kDirty, dirty.data() + had, kCacheDepth));
  return dirty;
}

// Freed objects of `bytes` are cleared once this many wait, so that the kernel is asked about
// residency once per many objects (a system call costs about 1.5 us on our VMs); until then
// fresh objects are carved, unless that would start a new chunk. At most 16 KiB of slot-0 space
// per class waits.
std::size_t pool_base::reclaim_threshold(std::size_t bytes) {
  return std::max<std::size_t>(kCacheDepth + 1, (16 * 1024) / bytes);
}

char* pool_base::take_small(std::size_t cls, std::unique_lock<std::mutex>& lock) {
  const std::size_t bytes = (cls + 1) * kGranule;
  std::vector<char*>& central = central_[cls];
  if (!debug_ && central.empty()) {
    std::vector<char*>& dirty = collect_dirty(cls);
    std::vector<char*> batch;
    if (dirty.size() >= reclaim_threshold(bytes)) {
      batch.swap(dirty);
    } else if (ngroups_.load(std::memory_order_relaxed) == 0 ||
               bump_ + bytes * (kCacheDepth + 1) > stride_) {
      // Reuse before growing: carving would start a new chunk, so every index's freed objects
      // of this class are cleared first.
      for (auto& list : dirty_[cls]) {
        batch.insert(batch.end(), list.begin(), list.end());
        list.clear();
      }
    }
    if (!batch.empty()) {
      // The batch is this thread's alone now: clear it without holding up other threads.
      lock.unlock();
      clear_batch(batch, bytes, 0);
      lock.lock();
      central.insert(central.end(), batch.begin(), batch.end());
    }
  }
  if (central.empty()) {
    // Carve a batch so that the next allocations come from the clean stack.
    for (std::size_t n = debug_ ? 1 : kCacheDepth + 1; n > 0; --n) {
      char* fresh = carve(bytes);
      central.push_back(fresh);
    }
  }
  char* p = central.back();
  central.pop_back();
  if (debug_) {
    reuse_poisoned(p, bytes);
    return p;
  }
  // Refill the clean stack from the top of the central list, so the next allocations on this
  // index need no lock.
  const std::size_t n = std::min(central.size(), kCacheDepth);
  const auto from = central.end() - static_cast<std::ptrdiff_t>(n);
  const std::size_t pushed = cache_push_many(cls, kClean, &*from, n);
  central.erase(from, from + static_cast<std::ptrdiff_t>(pushed));
  return p;
}

// The bytes of an object of `size` above kCachedMaxBytes: rounded up to one of four sizes per
// doubling (at most 25% more), so that freed objects of similar sizes serve each other, and
// memory does not grow with the number of distinct sizes used.
std::size_t pool_base::large_bytes(std::size_t size) const noexcept {
  const unsigned lg = static_cast<unsigned>(std::bit_width(size - 1));  // size <= 2^lg
  const std::size_t step = std::size_t{1} << (lg - 3);
  return std::min((size + step - 1) & ~(step - 1), stride_);
}

char* pool_base::take_large(std::size_t bytes) {
  std::vector<char*>& reuse = central_large_[bytes];
  if (reuse.empty()) return carve(bytes);
  char* p = reuse.back();
  reuse.pop_back();
  if (debug_) reuse_poisoned(p, bytes);
  return p;
}

void* pool_base::allocate_slow(std::size_t size, const void* init) {
  if (size == 0 || size > stride_)
    throw std::invalid_argument("percpu::pool: allocation size " + std::to_string(size) +
                                " outside [1, stride " + std::to_string(stride_) + "]");
  char* p = nullptr;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    if (size <= kCachedMaxBytes) {
      const std::size_t cls = (size - 1) / kGranule;
      p = take_small(cls, lock);
      __atomic_store_n(code_of(p), code_for(cls), __ATOMIC_RELAXED);
    } else {
      const std::size_t bytes = large_bytes(size);
      p = take_large(bytes);
      live_large_[p] = bytes;
      __atomic_store_n(code_of(p), kLargeCode, __ATOMIC_RELAXED);
    }
  }
  if (init != nullptr)
    for (int i = 0; i < slots_; ++i)
      std::memcpy(p + static_cast<std::size_t>(i) * stride_, init, size);
  return p;
}

// The fast path found the dirty stack full: it and `p` move to the central dirty list.
void pool_base::flush_dirty(std::size_t cls, char* p) {
  std::lock_guard<std::mutex> lock(mutex_);
  collect_dirty(cls).push_back(p);
}

void pool_base::free_slow(void* ptr, std::size_t size) {
  char* p = static_cast<char*>(ptr);
  std::lock_guard<std::mutex> lock(mutex_);
  unsigned char* code = code_of(p);
  if (code == nullptr && chunk_of(p).gr != nullptr)
    throw std::logic_error("percpu::pool: free: " + address(p) +
                           " is not the start of an object (inside a slot or between objects)");
  if (code == nullptr)
    throw std::invalid_argument("percpu::pool: free: " + address(p) +
                                " is not an object of this pool");
  if (size == 0 || size > stride_) report_bad_free(p, size, code);
  if (size <= kCachedMaxBytes) {
    const std::size_t cls = (size - 1) / kGranule;
    unsigned char expected = code_for(cls);
    if (!__atomic_compare_exchange_n(code, &expected, kFreeCode, false, __ATOMIC_ACQ_REL,
                                     __ATOMIC_RELAXED))
      report_bad_free(p, size, code);
    batch_.assign(1, p);
    clear_batch(batch_, (cls + 1) * kGranule, debug_ ? kPoison : 0);
    central_[cls].push_back(p);
    return;
  }
  const std::size_t bytes = large_bytes(size);
  const auto it = live_large_.find(p);
  if (*code != kLargeCode || it == live_large_.end() || it->second != bytes)
    report_bad_free(p, size, code);
  live_large_.erase(it);
  __atomic_store_n(code, kFreeCode, __ATOMIC_RELAXED);
  batch_.assign(1, p);
  clear_batch(batch_, bytes, debug_ ? kPoison : 0);
  central_large_[bytes].push_back(p);
}

void pool_base::report_bad_free(const char* p, std::size_t size, const unsigned char* code) {
  const unsigned char c = __atomic_load_n(code, __ATOMIC_RELAXED);
  std::size_t allocated = 0;
  if (c == kLargeCode) {
    const auto it = live_large_.find(p);
    allocated = it == live_large_.end() ? 0 : it->second;
  } else if (c != kFreeCode && c != kQuarantinedCode) {
    allocated = c * kGranule;
  }
  if (c == kQuarantinedCode)
    throw std::logic_error("percpu::pool: free: " + address(p) +
                           " was withdrawn after a write after free; it is not live");
  if (allocated == 0)
    throw std::logic_error("percpu::pool: free: " + address(p) +
                           " is not a live object (double free, or not the start of an object)");
  throw std::logic_error("percpu::pool: free: size " + std::to_string(size) + " of " + address(p) +
                         " differs from the allocation's " + std::to_string(allocated));
}

std::size_t pool_base::drain_caches(int index) {
  const remote_result<std::size_t> r = try_drain_caches(index);
  if (r.error) throw std::system_error(r.error, "percpu::pool::drain_caches");
  return r.value;
}

remote_result<std::size_t> pool_base::try_drain_caches(int index) {
  const char* region = caches_.at(index);
  // Pages of this index's caches that were never touched hold empty stacks; reading them would
  // populate them.
  const std::size_t page = std::size_t{1} << page_shift_;
  const std::size_t stack_bytes = (1 + kCacheDepth) * sizeof(std::intptr_t);
  const auto start = reinterpret_cast<std::uintptr_t>(region) / page * page;
  const std::size_t span =
      reinterpret_cast<std::uintptr_t>(region) + kCachedClasses * 2 * stack_bytes - start;
  std::vector<unsigned char> resident((span + page - 1) / page);
  if (mincore(reinterpret_cast<void*>(start), span, resident.data()) != 0)
    resident.assign(resident.size(), 1);
  std::vector<char*> found[kCachedClasses][2];
  remote_result<std::size_t> result;  // a fence failed: what was taken so far still goes central
  std::size_t& moved = result.value;
  {
    detail::remote_section remote;
    for (std::size_t cls = 0; cls < kCachedClasses; ++cls) {
      for (int which : {kClean, kDirty}) {
        std::intptr_t* w = cache_words(index, cls, which);
        if ((resident[(reinterpret_cast<std::uintptr_t>(w) - start) / page] & 1) == 0) continue;
        if ((__atomic_load_n(&w[0], __ATOMIC_ACQUIRE) & ~detail::kCountClosed) == 0) continue;
        found[cls][which].reserve(kCacheDepth);  // before closing: others wait while it is
        std::intptr_t n = 0;
        result.error = mode_ == index_mode::cpu_id
                           ? detail::try_close_count<index_mode::cpu_id>(&w[0], index, n)
                           : detail::try_close_count<index_mode::mm_cid>(&w[0], index, n);
        if (result.error) break;
        detail::reopen_on_exit reopen(&w[0], n);  // as it was, unless the copy completes
        for (std::intptr_t k = 1; k <= n; ++k)
          found[cls][which].push_back(reinterpret_cast<char*>(w[k]));
        detail::tsan_acquire_each(&w[1], static_cast<std::size_t>(n));  // TSan: taken objects
        reopen.reopen_with(0);                                          // reopens, empty
        moved += static_cast<std::size_t>(n);
      }
      if (result.error) break;
    }
  }
  {
    // The mutex only after the remote section: fork() takes them in the other order.
    std::lock_guard<std::mutex> lock(mutex_);
    for (std::size_t cls = 0; cls < kCachedClasses; ++cls) {
      central_[cls].insert(central_[cls].end(), found[cls][kClean].begin(),
                           found[cls][kClean].end());
      if (found[cls][kDirty].empty()) continue;
      if (dirty_[cls].empty()) dirty_[cls].resize(static_cast<std::size_t>(caches_.size()));
      auto& list = dirty_[cls][static_cast<std::size_t>(index)];
      list.insert(list.end(), found[cls][kDirty].begin(), found[cls][kDirty].end());
    }
  }
  return result;
}

pool_stats pool_base::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  pool_stats s;
  std::vector<unsigned char> scratch;
  const int n = ngroups_.load(std::memory_order_relaxed);
  const std::size_t page = page_size();
  for (int g = 0; g < n; ++g) {
    const group& gr = groups_[g];
    s.reserved_bytes += gr.chunks << span_shift_;
    const std::size_t used = g + 1 < n ? gr.chunks : chunk_ + 1;
    for (std::size_t c = 0; c < used; ++c)
      s.resident_bytes += resident_bytes_windowed(gr.base + (c << span_shift_), chunk_bytes_);
    // Count live objects in the table pages that exist (reading the others would populate
    // them; they hold no live codes).
    s.metadata_bytes +=
        resident_bytes_of(gr.codes, gr.chunks * units_ + written_bytes(gr.chunks), scratch);
    for (std::size_t pg = 0; pg < scratch.size(); ++pg) {
      if ((scratch[pg] & 1) == 0) continue;
      const std::size_t end = std::min((pg + 1) * page, gr.chunks * units_);
      for (std::size_t k = pg * page; k < end; ++k) {
        const unsigned char c = gr.codes[k];
        s.live_objects += c != kFreeCode && c != kQuarantinedCode;
      }
    }
  }
  s.metadata_bytes += resident_bytes_of(caches_.data(), caches_.bytes(), scratch);
  s.free_objects = carved_ - s.live_objects - quarantined_;
  return s;
}

namespace detail {

pool_object take_from_pool(pool_base& pool, std::size_t bytes, int count) {
  if (count > pool.slots())
    throw std::invalid_argument("percpu: a structure with " + std::to_string(count) +
                                " indices needs a pool with as many slots, not " +
                                std::to_string(pool.slots()));
  return pool_object{static_cast<char*>(pool.allocate_bytes(bytes)), pool.stride()};
}

void give_back_to_pool(pool_base& pool, void* base, std::size_t bytes) noexcept {
  try {
    pool.free_bytes(base, bytes);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "percpu: returning a structure's slots to its pool failed: %s\n",
                 e.what());
    std::abort();
  }
}

}  // namespace detail
}  // namespace percpu
