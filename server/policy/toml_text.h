// Reads and parses an operator's TOML file (--policy-file, --webhooks) after the checks
// toml++ does not make: a size cap and valid UTF-8, each with the file and line. A
// syntax error comes back as "FILE:LINE: syntax error: ..." with toml++'s text quoted
// and capped, since it can repeat a key or value from the file. Header-only: each
// reader links toml++ itself.
#pragma once

#include <sys/stat.h>
#include <toml++/toml.h>

#include <cstddef>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/base/file_io.h"
#include "common/base/file_problems.h"
#include "common/base/text.h"

namespace trainyard {

// The size error, naming the file's `kind` ("policy file") and its size when known.
inline absl::Status TooLargeError(const std::string& file_name, const std::string& kind, std::string size,
                                  std::size_t max_bytes) {
  return absl::InvalidArgumentError(
      absl::StrCat(file_name, ":1: the ", kind, " is ", size, " bytes, more than the cap of ", max_bytes));
}

// `kind` names the file in errors ("policy file", "webhooks file").
inline absl::StatusOr<toml::table> ParseTomlText(std::string_view text, const std::string& file_name,
                                                 std::size_t max_bytes, const std::string& kind) {
  if (text.size() > max_bytes) return TooLargeError(file_name, kind, absl::StrCat(text.size()), max_bytes);
  if (uint32_t line = FirstInvalidUtf8Line(text); line != 0) {
    return absl::InvalidArgumentError(absl::StrCat(file_name, ":", line, ": not valid UTF-8"));
  }
  try {
    return toml::parse(text, file_name);
  } catch (const toml::parse_error& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(file_name, ":", e.source().begin.line, ": syntax error: ", Quote(e.description())));
  }
}

// The file's text, at most `max_bytes`: a larger file is the size error at line 1, any
// other failure ReadFile's, prefixed with "KIND 'PATH': ".
inline absl::StatusOr<std::string> ReadTomlFile(const std::string& path, std::size_t max_bytes,
                                                const std::string& kind) {
  absl::StatusOr<std::string> text = ReadFile(path, max_bytes);
  if (text.ok()) return text;
  if (absl::IsOutOfRange(text.status())) {
    struct stat st {};
    std::string size = absl::StrCat("more than ", max_bytes);
    if (::stat(path.c_str(), &st) == 0) size = absl::StrCat(st.st_size);
    return TooLargeError(path, kind, size, max_bytes);
  }
  return absl::Status(text.status().code(), absl::StrCat(kind, " ", Quoted(path), ": ", text.status().message()));
}

}  // namespace trainyard
