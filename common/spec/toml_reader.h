// Job files in TOML: `[section]` tables whose keys are the job spec's keys.
#pragma once

#include <string_view>

#include "common/spec/spec_error.h"
#include "common/spec/spec_input.h"

namespace trainyard::spec {

// True when this build can read TOML (toml++ was found; an accelerator box with only
// LibTorch may lack it and then reads JSON job files only).
bool HaveToml();

// Parses TOML `text`; `source_name` (usually the path) prefixes positions, e.g.
//   debug.toml:7:1: unknown key model.dimm (did you mean model.dim?)
//   debug.toml:5:9: training.steps: expected integer, got string
// When a file has several problems the earliest in the file is reported, with a count
// of the others. Only keys present in the file are set.
//
// `reserved_table`, when not empty, names a top-level key that another reader owns
// (the [sweep] table, common/spec/sweep_reader.h): it is skipped here, not refused.
Result<SpecInput> ParseToml(std::string_view text, std::string_view source_name,
                            std::string_view reserved_table = {});

}  // namespace trainyard::spec
