// Page residency for the per-CPU pool (pool.cpp): which pages of a range may hold data written
// since they were mapped, and how many bytes of a range are resident. Reading a page that was
// never touched would populate it on kernels without a shared zero page, so the pool asks the
// kernel before it clears or checks freed objects.
#pragma once

#include <cstddef>
#include <vector>

namespace percpu::detail {

/// The kernel's page size in bytes (sysconf, read once).
std::size_t page_size();

/// For each of `pages` pages from `start` (page-aligned), writes to out[i] whether it may hold
/// data written since it was mapped: 1 when resident or swapped out, 0 when never touched.
/// Source of the bits: Documentation/admin-guide/mm/pagemap.rst (bit 63 present, 62 swapped).
/// Without /proc/self/pagemap it uses mincore(2), which sees resident pages only: with swap
/// configured, every page is then reported as possibly written.
void page_states(const char* start, std::size_t pages, unsigned char* out);

/// Resident bytes of [start, start + bytes) (mincore(2)), with `scratch` as the vector of its
/// page states (reused across calls). 0 for a range mincore refuses.
std::size_t resident_bytes_of(const void* start, std::size_t bytes,
                              std::vector<unsigned char>& scratch);

/// The same, asked in windows of 256 MiB (a chunk
/// of many slots can span terabytes of address space). 0 for a range mincore refuses.
std::size_t resident_bytes_windowed(const char* start, std::size_t bytes);

/// Closes the pagemap descriptor in a forked child (fork handler): a child must not read its
/// parent's page tables through an inherited descriptor; the next call opens its own.
void forget_pagemap_in_child() noexcept;

}  // namespace percpu::detail
