#include "common/elf_footprint.h"

#include <elf.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <vector>

namespace percpu::cli {
namespace {

std::optional<elf_footprint> fail(std::string* error, const std::string& why) {
  if (error) *error = why;
  return std::nullopt;
}

// A T at `offset` of `bytes`, if it fits.
template <class T>
bool read_at(const std::vector<char>& bytes, std::uint64_t offset, T* out) {
  if (offset > bytes.size() || bytes.size() - offset < sizeof(T)) return false;
  std::memcpy(out, bytes.data() + offset, sizeof(T));
  return true;
}

}  // namespace

std::optional<elf_footprint> read_elf_footprint(const std::string& path, std::string* error) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return fail(error, "cannot open " + path);
  const std::vector<char> bytes((std::istreambuf_iterator<char>(in)),
                                std::istreambuf_iterator<char>());
  Elf64_Ehdr eh;
  if (!read_at(bytes, 0, &eh) || std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 ||
      eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_ident[EI_DATA] != ELFDATA2LSB)
    return fail(error, path + " is not a little-endian ELF64 file");
  elf_footprint f;
  f.file_bytes = bytes.size();
  for (unsigned i = 0; i < eh.e_phnum; ++i) {
    Elf64_Phdr ph;
    if (!read_at(bytes, eh.e_phoff + std::uint64_t{i} * eh.e_phentsize, &ph))
      return fail(error, path + ": program header out of the file");
    if (ph.p_type == PT_TLS) f.tls_bytes += ph.p_memsz;
  }
  Elf64_Shdr names;
  if (eh.e_shstrndx == SHN_UNDEF ||
      !read_at(bytes, eh.e_shoff + std::uint64_t{eh.e_shstrndx} * eh.e_shentsize, &names))
    return fail(error, path + ": no section names");
  for (unsigned i = 0; i < eh.e_shnum; ++i) {
    Elf64_Shdr sh;
    if (!read_at(bytes, eh.e_shoff + std::uint64_t{i} * eh.e_shentsize, &sh))
      return fail(error, path + ": section header out of the file");
    if ((sh.sh_flags & SHF_EXECINSTR) && (sh.sh_flags & SHF_ALLOC)) f.code_bytes += sh.sh_size;
    const std::uint64_t name_at = names.sh_offset + sh.sh_name;
    if (name_at < bytes.size() &&
        std::strncmp(bytes.data() + name_at, ".text", bytes.size() - name_at) == 0)
      f.text_bytes = sh.sh_size;
  }
  return f;
}

}  // namespace percpu::cli
