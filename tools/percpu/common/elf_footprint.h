// The size an ELF shared library adds to a program: its machine code and its thread-local
// storage per thread, read from the file's section and program headers (<elf.h>).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace percpu::cli {

/// Sizes of one ELF64 file, in bytes.
struct elf_footprint {
  std::uint64_t code_bytes = 0;  ///< sum of the executable sections (.text, .plt, .init, ...)
  std::uint64_t text_bytes = 0;  ///< the .text section alone
  std::uint64_t tls_bytes = 0;   ///< PT_TLS memory size: thread-local bytes every thread gets
  std::uint64_t file_bytes = 0;  ///< the file's size
};

/// Reads the footprint of the ELF64 file at `path`. Returns nullopt, with the reason in
/// `*error` when given, if the file cannot be read or is not a little-endian ELF64 object.
std::optional<elf_footprint> read_elf_footprint(const std::string& path,
                                                std::string* error = nullptr);

}  // namespace percpu::cli
