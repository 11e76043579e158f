#include "common/spec/job_file_reader.h"

#include <fstream>

#include "absl/strings/match.h"
#include "common/base/file_io.h"
#include "common/spec/hf_config.h"
#include "common/spec/json_io.h"
#include "common/spec/overrides.h"
#include "common/spec/toml_reader.h"

namespace trainyard::spec {
namespace {

SpecError FileError(SpecError::Kind kind, const std::string& path, const std::string& what) {
  SpecError e = Invalid("", "file", what);
  e.kind = kind;
  e.origin = path;
  return e;
}

}  // namespace

bool IsJsonJobText(std::string_view source_name, std::string_view text) {
  if (source_name.size() >= 5 && source_name.substr(source_name.size() - 5) == ".json") return true;
  const std::size_t first = text.find_first_not_of(" \t\r\n");
  return first != std::string_view::npos && text[first] == '{';
}

Result<std::string> ReadJobFile(const std::string& path) {
  absl::StatusOr<std::string> text = ReadFile(path, kMaxJobFileBytes);
  if (text.ok()) return *std::move(text);
  if (absl::IsOutOfRange(text.status())) {
    return FileError(SpecError::Kind::kInvalid, path,
                     "job file is larger than the limit of " + std::to_string(kMaxJobFileBytes) + " bytes (1 MiB)");
  }
  if (absl::IsInternal(text.status()) && absl::StartsWith(text.status().message(), "cannot read")) {
    return FileError(SpecError::Kind::kInvalid, path, "cannot read job file");
  }
  return FileError(SpecError::Kind::kNotFound, path,
                   "cannot open job file (" + std::string(text.status().message()) + ")");
}

Result<SpecInput> ParseJobText(std::string_view text, std::string_view source_name,
                               const std::vector<std::string>& overrides, std::string_view reserved_table) {
  if (text.size() > kMaxJobFileBytes) {
    return FileError(SpecError::Kind::kInvalid, std::string(source_name),
                     "job file is " + std::to_string(text.size()) + " bytes, over the limit of " +
                         std::to_string(kMaxJobFileBytes) + " bytes (1 MiB)");
  }
  Result<SpecInput> input =
      IsJsonJobText(source_name, text) ? ParseJson(text, source_name) : ParseToml(text, source_name, reserved_table);
  if (!input.ok()) return input;
  for (const std::string& o : overrides) {
    if (auto e = ApplyOverride(o, input.value())) return *e;
  }
  return input;
}

Result<SpecInput> LoadJobFile(const std::string& path, const std::vector<std::string>& overrides) {
  Result<std::string> text = ReadJobFile(path);
  if (!text.ok()) return text.error();
  Result<SpecInput> input = ParseJobText(text.value(), path, overrides);
  if (!input.ok()) return input;
  // Starting from a Hugging Face model folder: its config.json says what the model is,
  // so the keys it determines are filled (or checked) here, where submit, preflight and
  // trainyard-train all pass. manifest.json marks the engine's own checkpoints.
  if (auto e = ApplyHuggingFaceFolder(input.value())) return *e;
  return input;
}

}  // namespace trainyard::spec
