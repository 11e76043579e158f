#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "common/spec/job_file_reader.h"
#include "trainyard/v1/spec.pb.h"

namespace trainyard {

// Job files as the CLI submits them: the spec core reads the file (common/spec/:
// TOML, or JSON for `.json` files and text starting with '{') and the --set overrides,
// and the keys that were given become a JobSpec proto. Keys not given stay unset: the
// controller applies the preset and defaults, so they are decided in one place.
//
// Every error is INVALID_ARGUMENT (NOT_FOUND for a file that cannot be opened) and
// names the place and the field, e.g.
//   debug.toml:7:1: unknown key model.dimm (did you mean model.dim?)
//   debug.toml:5:9: training.steps: expected integer, got string
//   --set training.steps: expected integer, got string
// When a file has several problems, the earliest one in the file is reported.

using spec::kMaxJobFileBytes;

// Reads and parses `path`, then applies `overrides` ("section.key=value", the CLI's
// --set) in order; later overrides win.
absl::StatusOr<v1::JobSpec> LoadJobFile(const std::string& path,
                                        const std::vector<std::string>& overrides = {});

// Parses `text`; `source_name` prefixes error positions (usually the file path).
absl::StatusOr<v1::JobSpec> ParseJobToml(std::string_view text, std::string_view source_name,
                                         const std::vector<std::string>& overrides = {});

}  // namespace trainyard
