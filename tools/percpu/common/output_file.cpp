#include "common/output_file.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>

namespace percpu::cli {

bool can_write(const std::string& path) {
  if (path.empty()) return true;
  std::FILE* f = std::fopen(path.c_str(), "a");
  if (f != nullptr && std::fclose(f) == 0) return true;
  std::cerr << "percpu: cannot write " << path << ": " << std::strerror(errno) << "\n";
  return false;
}

bool write_text_file(const std::string& path, const std::string& text) {
  std::FILE* f = std::fopen(path.c_str(), "w");
  bool ok = f != nullptr;
  if (ok) ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  if (f != nullptr && std::fclose(f) != 0) ok = false;
  if (!ok) std::cerr << "percpu: cannot write " << path << ": " << std::strerror(errno) << "\n";
  return ok;
}

}  // namespace percpu::cli
