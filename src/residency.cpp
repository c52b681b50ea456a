// Which pages of a range hold data, read from the kernel: /proc/self/pagemap (resident or
// swapped out), else mincore(2). The pool clears freed objects only on pages that may hold data
// (see residency.h).
#include "residency.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/sysinfo.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <vector>

namespace percpu::detail {

std::size_t page_size() {
  static const std::size_t size = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  return size;
}

// True when some anonymous page could be swapped out: then a page that is not resident may
// still hold data.
static bool swap_configured() {
  struct sysinfo si {};
  return sysinfo(&si) != 0 || si.totalswap > 0;
}

// /proc/self/pagemap, opened on first use; -1 when unavailable (a restricted /proc). A forked
// child must not read its parent's page tables through an inherited descriptor: the fork
// handler closes it in the child (g_pagemap_fd back to kPagemapUnopened).
constexpr int kPagemapUnopened = -2;
static std::atomic<int> g_pagemap_fd{kPagemapUnopened};

static int pagemap_fd() {
  int fd = g_pagemap_fd.load(std::memory_order_acquire);
  if (fd != kPagemapUnopened) return fd;
  fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
  int expected = kPagemapUnopened;
  if (!g_pagemap_fd.compare_exchange_strong(expected, fd) && fd >= 0) {
    close(fd);  // another thread opened it first
    fd = expected;
  }
  return fd;
}

void forget_pagemap_in_child() noexcept {
  const int fd = g_pagemap_fd.exchange(kPagemapUnopened);
  if (fd >= 0) close(fd);
}

// For each of `pages` pages from `start`, whether it may hold data written since it was mapped:
// resident or swapped out. A page never touched holds zeros and is left alone, because on
// kernels without a shared zero page even reading it would populate it.
// Source of the bits: Documentation/admin-guide/mm/pagemap.rst (bit 63 present, 62 swapped).
void page_states(const char* start, std::size_t pages, unsigned char* out) {
  const std::size_t page = page_size();
  if (const int fd = pagemap_fd(); fd >= 0) {
    std::uint64_t entries[512];
    std::size_t done = 0;
    while (done < pages) {
      const std::size_t n = std::min<std::size_t>(pages - done, 512);
      const off_t at =
          static_cast<off_t>((reinterpret_cast<std::uintptr_t>(start) / page + done) * 8);
      if (pread(fd, entries, n * 8, at) != static_cast<ssize_t>(n * 8)) break;
      for (std::size_t i = 0; i < n; ++i) out[done + i] = (entries[i] >> 62) != 0;
      done += n;
    }
    if (done == pages) return;
  }
  // Without pagemap: mincore(2) sees resident pages only, so with swap configured every page
  // must be assumed written.
  if (swap_configured() || mincore(const_cast<char*>(start), pages * page, out) != 0) {
    std::memset(out, 1, pages);
    return;
  }
  for (std::size_t i = 0; i < pages; ++i) out[i] &= 1;
}

// Resident pages of [start, start + bytes) (mincore(2)), in bytes.
std::size_t resident_bytes_of(const void* start, std::size_t bytes,
                              std::vector<unsigned char>& scratch) {
  const std::size_t page = page_size();
  scratch.resize((bytes + page - 1) / page);
  if (mincore(const_cast<void*>(start), bytes, scratch.data()) != 0) return 0;
  std::size_t n = 0;
  for (unsigned char v : scratch) n += v & 1;
  return n * page;
}

// The same for a range of any size, asked in windows of 256 MiB (a chunk of many slots can span
// terabytes of address space).
std::size_t resident_bytes_windowed(const char* start, std::size_t bytes) {
  constexpr std::size_t kWindow = std::size_t{256} << 20;
  std::vector<unsigned char> scratch;
  std::size_t n = 0;
  for (std::size_t done = 0; done < bytes; done += kWindow)
    n += resident_bytes_of(start + done, std::min(kWindow, bytes - done), scratch);
  return n;
}

}  // namespace percpu::detail
