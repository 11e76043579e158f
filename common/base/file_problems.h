// The problems found in one configuration file (a --policy-file, a --webhooks file),
// collected as a reader finds them and reported as one error: the earliest in the file
// first, since toml++ tables iterate in key order rather than file order, then how many
// more there are ("policy.toml:7: ... (and 2 more problems)").
//
// Not thread-safe; one per file read.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"

namespace trainyard {

class FileProblems {
 public:
  explicit FileProblems(std::string file_name) : file_name_(std::move(file_name)) {}

  void Add(uint32_t line, uint32_t column, std::string message);
  bool empty() const { return problems_.empty(); }
  // OK without problems; else INVALID_ARGUMENT "FILE:LINE: message (and N more problems)".
  absl::Status Result();

 private:
  struct Problem {
    uint32_t line = 0;
    uint32_t column = 0;
    std::string message;
  };
  std::string file_name_;
  std::vector<Problem> problems_;
};

// The 1-based line of the first byte of `text` that is not valid UTF-8 (a sequence
// never spans a newline, which is ASCII); 0 when all of `text` is valid.
uint32_t FirstInvalidUtf8Line(std::string_view text);

}  // namespace trainyard
