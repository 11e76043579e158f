#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "trainyard/v1/spec.pb.h"

namespace trainyard {

// Job files are TOML whose sections and keys are exactly the JobSpec sub-messages and
// their fields ([job] name = ..., [model] dim = ..., ...). The key set comes from the
// proto descriptors, so adding a field to spec.proto makes it a valid key.
//
// Only keys present in the file (or in an override) are set on the returned JobSpec;
// presets and defaults are applied later (common/spec_defaults.h).
//
// Every error is INVALID_ARGUMENT and names the place and the field, e.g.
//   debug.toml:7:1: unknown key model.dimm
//   debug.toml:5:9: training.steps: expected integer, got string
//   --set training.steps: expected integer, got string
// When a file has several problems, the earliest one in the file is reported.

// Job files larger than this are rejected before parsing (DESIGN.md: every size has a cap).
inline constexpr std::size_t kMaxJobFileBytes = std::size_t{1} << 20;

// Reads and parses `path`, then applies `overrides` ("section.key=value", the CLI's
// --set) in order; later overrides win. A missing file is NOT_FOUND.
absl::StatusOr<v1::JobSpec> LoadJobFile(const std::string& path,
                                        const std::vector<std::string>& overrides = {});

// Parses TOML `text`; `source_name` prefixes error positions (usually the file path).
absl::StatusOr<v1::JobSpec> ParseJobToml(std::string_view text, std::string_view source_name,
                                         const std::vector<std::string>& overrides = {});

// Applies one "section.key=value" override to `spec`. The value is parsed as a TOML
// value (20, 1e-3, false, "softmax"); text that is not valid TOML is taken as a string,
// and for string fields any unquoted value is taken literally (--set job.name=123).
absl::Status ApplyOverride(std::string_view override_text, v1::JobSpec* spec);

}  // namespace trainyard
