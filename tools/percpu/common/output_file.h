// Output files of the percpu command: checked before long work, and checked when written
// (a full device fails only when the file is closed), with the system's reason on stderr.
#pragma once

#include <string>

namespace percpu::cli {

/// Checks before a long run that `path` (if not empty) can be written (it creates the file if
/// missing); prints why not (with the system's reason).
bool can_write(const std::string& path);

/// Writes `text` to `path`, replacing it. Returns false after printing why (with the system's
/// reason) when it cannot, including a failure seen only when the file is closed (a full disk,
/// /dev/full).
bool write_text_file(const std::string& path, const std::string& text);

}  // namespace percpu::cli
