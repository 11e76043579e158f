// The text of an input as a tokenize run's tokenizers take it: the --invalid-utf8
// policy applied to a segment, and the wording of an error that names the input.
// Pure; thread-safe.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "client/tokenize/segment_reader.h"

namespace trainyard::tokenize {

// "input 'PATH': what".
std::string InputError(const std::string& path, absl::string_view what);

// Applies the UTF-8 policy to a segment: OK as it is, replaced (counting the bytes in
// *replaced), or an error naming the file and byte.
absl::Status CheckUtf8(const std::string& path, bool replace, Segment* segment, std::int64_t* replaced);

}  // namespace trainyard::tokenize
