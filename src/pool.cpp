// The per-CPU pool's bookkeeping: chunks of slots x stride bytes, a bump offset, free lists by
// size, and clearing freed objects without populating pages that were never touched.
#include "percpu/pool.h"

#include <sys/mman.h>
#include <sys/sysinfo.h>
#include <unistd.h>

#include <algorithm>

namespace percpu {
namespace {

constexpr unsigned char kPoison = 0xA5;

std::size_t page_size() {
  static const std::size_t size = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  return size;
}

// True when some anonymous page could be swapped out: then a page that is not resident may
// still hold data, and only writing it clears it.
bool swap_configured() {
  struct sysinfo si {};
  return sysinfo(&si) != 0 || si.totalswap > 0;
}

// True when all `bytes` at `p` equal `fill`. Reading does not populate a page (a read fault
// maps the shared zero page), so clearing skips slots that already read as cleared.
bool holds_only(const char* p, std::size_t bytes, unsigned char fill) {
  for (std::size_t i = 0; i < bytes; ++i)
    if (static_cast<unsigned char>(p[i]) != fill) return false;
  return true;
}

}  // namespace

pool_base::pool_base(int slots, const pool_options& options)
    : stride_(options.stride), slots_(slots), debug_(options.debug) {
  if (stride_ == 0 || stride_ % page_size() != 0)
    throw std::invalid_argument("percpu::pool: stride " + std::to_string(stride_) +
                                " is not a positive multiple of the page size " +
                                std::to_string(page_size()));
  if (slots_ <= 0)
    throw std::invalid_argument("percpu::pool: slots must be positive, not " +
                                std::to_string(slots_));
  if (stride_ > (std::size_t{1} << 47) / static_cast<std::size_t>(slots_))
    throw std::invalid_argument("percpu::pool: slots x stride exceeds the address space");
}

pool_base::~pool_base() {
  for (char* c : chunks_) munmap(c, static_cast<std::size_t>(slots_) * stride_);
}

std::size_t pool_base::rounded(std::size_t size) {
  return (size + 7) / 8 * 8;
}

bool pool_base::in_pool(const char* p) const {
  for (const char* c : chunks_)
    if (p >= c && p < c + stride_) return true;  // slot 0 of some chunk
  return false;
}

void* pool_base::allocate_bytes(std::size_t size, const void* init) {
  if (size == 0 || size > stride_)
    throw std::invalid_argument("percpu::pool: allocation size " + std::to_string(size) +
                                " outside [1, stride " + std::to_string(stride_) + "]");
  const std::size_t bytes = rounded(size);
  char* p = nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto& reuse = free_[bytes];
    if (!reuse.empty()) {
      p = reuse.back();
      reuse.pop_back();
      // Debug frees poisoned the object: make it read as zero again (free_bytes() zeroes
      // otherwise).
      if (debug_) clear_slots(p, bytes, 0);
    } else {
      if (chunks_.empty() || bump_ + bytes > stride_) {
        void* c = mmap(nullptr, static_cast<std::size_t>(slots_) * stride_, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (c == MAP_FAILED) throw std::bad_alloc();
        chunks_.push_back(static_cast<char*>(c));
        bump_ = 0;
      }
      p = chunks_.back() + bump_;  // never used: zero-filled by the kernel on first touch
      bump_ += bytes;
    }
    live_[p] = bytes;
  }
  if (init != nullptr)
    for (int i = 0; i < slots_; ++i)
      std::memcpy(p + static_cast<std::size_t>(i) * stride_, init, size);
  return p;
}

void pool_base::free_bytes(void* ptr, std::size_t size) {
  char* p = static_cast<char*>(ptr);
  std::lock_guard<std::mutex> lock(mutex_);
  if (p == nullptr || !in_pool(p))
    throw std::invalid_argument("percpu::pool: free: pointer is not an object of this pool");
  // Every live object is recorded, so a double free, an interior pointer or a wrong size is
  // refused before anything is written (a wrong size would clear a neighbour).
  const auto it = live_.find(p);
  if (it == live_.end())
    throw std::logic_error(
        "percpu::pool: free: not a live object (double free, or not the start of an object)");
  if (size == 0 || rounded(size) != it->second)
    throw std::logic_error("percpu::pool: free: size " + std::to_string(size) +
                           " differs from the allocation's " + std::to_string(it->second));
  const std::size_t bytes = it->second;
  live_.erase(it);
  // Clear now, so that allocate_bytes() can hand the object out without a system call.
  clear_slots(p, bytes, debug_ ? kPoison : 0);
  free_[bytes].push_back(p);
}

// Fills the object's bytes in every slot whose page is resident. A page that was never touched
// reads as zero and stays unpopulated; a page that is not resident because it was swapped out
// still holds data, so with swap configured every slot is written.
void pool_base::clear_slots(char* p, std::size_t bytes, unsigned char fill) {
  const bool all = swap_configured();
  const auto chunk = std::find_if(chunks_.begin(), chunks_.end(),
                                  [&](char* c) { return p >= c && p < c + stride_; });
  std::vector<unsigned char> resident;
  if (!all && chunk != chunks_.end()) {
    resident.resize(static_cast<std::size_t>(slots_) * stride_ / page_size());
    if (mincore(*chunk, static_cast<std::size_t>(slots_) * stride_, resident.data()) != 0)
      resident.assign(resident.size(), 1);  // cannot tell: write everything
  }
  for (int i = 0; i < slots_; ++i) {
    char* slot = p + static_cast<std::size_t>(i) * stride_;
    if (!all && chunk != chunks_.end()) {
      const std::size_t first = static_cast<std::size_t>(slot - *chunk) / page_size();
      const std::size_t last = static_cast<std::size_t>(slot + bytes - 1 - *chunk) / page_size();
      bool touched = false;
      for (std::size_t pg = first; pg <= last; ++pg) touched = touched || (resident[pg] & 1);
      if (!touched) continue;
    }
    if (!holds_only(slot, bytes, fill)) std::memset(slot, fill, bytes);
  }
}

pool_stats pool_base::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  pool_stats s;
  const std::size_t chunk_bytes = static_cast<std::size_t>(slots_) * stride_;
  s.reserved_bytes = chunks_.size() * chunk_bytes;
  std::vector<unsigned char> pages(chunk_bytes / page_size());
  for (char* c : chunks_) {
    if (mincore(c, chunk_bytes, pages.data()) != 0) continue;
    for (unsigned char v : pages) s.resident_bytes += (v & 1) ? page_size() : 0;
  }
  s.live_objects = live_.size();
  return s;
}

}  // namespace percpu
