// Job files on disk: TOML (the usual form) or JSON (the proto3 JSON of a JobSpec), with
// --set overrides on top. The given keys only; spec::ResolveAndValidate finishes them.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "common/spec/spec_error.h"
#include "common/spec/spec_input.h"

namespace trainyard::spec {

// Job files larger than this are refused before parsing (every size has a cap).
inline constexpr std::size_t kMaxJobFileBytes = std::size_t{1} << 20;

// The text of `path`, read up to one byte past the cap. Errors: kNotFound when it
// cannot be opened, kInvalid when it is over 1 MiB or unreadable.
Result<std::string> ReadJobFile(const std::string& path);

// True when ParseJobText reads `text` as JSON: `source_name` ends in ".json" or the
// text starts with '{'.
bool IsJsonJobText(std::string_view source_name, std::string_view text);

// JSON when IsJsonJobText, else TOML; then applies `overrides` ("section.key=value",
// later wins). File errors come before override errors. `reserved_table` as ParseToml's
// (TOML only; JSON job files have no such key).
Result<SpecInput> ParseJobText(std::string_view text, std::string_view source_name,
                               const std::vector<std::string>& overrides = {}, std::string_view reserved_table = {});

// ReadJobFile, then ParseJobText with the path as the source name; then, when
// checkpoint.initial_load_path (after overrides) is a Hugging Face model folder
// (IsHuggingFaceFolder: config.json, no manifest.json), ApplyHuggingFaceConfig fills the
// model keys its config.json determines, or reports a given key that contradicts it.
Result<SpecInput> LoadJobFile(const std::string& path, const std::vector<std::string>& overrides = {});

}  // namespace trainyard::spec
