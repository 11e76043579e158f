#include "client/tokenize/input_text.h"

#include <string_view>

#include "absl/strings/str_cat.h"
#include "common/base/text.h"

namespace trainyard::tokenize {

std::string InputError(const std::string& path, absl::string_view what) {
  return absl::StrCat("input ", Quoted(path), ": ", what);
}

absl::Status CheckUtf8(const std::string& path, bool replace, Segment* segment, std::int64_t* replaced) {
  std::size_t bad = FirstInvalidUtf8(segment->text);
  if (bad == std::string_view::npos) return absl::OkStatus();
  if (!replace) {
    return absl::InvalidArgumentError(
        InputError(path, absl::StrCat("invalid UTF-8 at byte ", segment->file_offset + static_cast<std::int64_t>(bad),
                                      " (the tokenizer encodes text; --invalid-utf8 replace encodes U+FFFD instead)")));
  }
  const std::string fixed = ToValidUtf8(segment->text);
  // Each invalid byte became the 3 bytes of U+FFFD.
  *replaced += static_cast<std::int64_t>(fixed.size() - segment->text.size()) / 2;
  segment->text = fixed;
  return absl::OkStatus();
}

}  // namespace trainyard::tokenize
