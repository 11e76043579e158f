#include "common/base/file_problems.h"

#include <algorithm>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "common/base/text.h"

namespace trainyard {

void FileProblems::Add(uint32_t line, uint32_t column, std::string message) {
  problems_.push_back({line, column, std::move(message)});
}

absl::Status FileProblems::Result() {
  if (problems_.empty()) return absl::OkStatus();
  std::stable_sort(problems_.begin(), problems_.end(), [](const Problem& a, const Problem& b) {
    return std::tie(a.line, a.column) < std::tie(b.line, b.column);
  });
  std::string message = absl::StrCat(file_name_, ":", problems_.front().line, ": ", problems_.front().message);
  if (problems_.size() > 1) {
    absl::StrAppend(&message, " (and ", problems_.size() - 1, " more problem", problems_.size() > 2 ? "s" : "", ")");
  }
  return absl::InvalidArgumentError(message);
}

uint32_t FirstInvalidUtf8Line(std::string_view text) {
  uint32_t line = 1;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    if (!IsUtf8(text.substr(start, end - start))) return line;
    start = end + 1;
    ++line;
  }
  return 0;
}

}  // namespace trainyard
