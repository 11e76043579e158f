// The key set of a job spec (sections, keys, value kinds), derived once from
// ForEachField in job_spec.h, and the typed access every reader and mapping uses.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "common/spec/job_spec.h"

namespace trainyard::spec {

enum class FieldKind { kInt32, kUint64, kDouble, kBool, kString };

// "integer", "float", "boolean", "string": the words of type errors.
const char* KindName(FieldKind kind);

struct FieldInfo {
  std::string section;
  std::string key;
  FieldKind kind;
  std::string path() const { return section + "." + key; }
};

// Every field, in ForEachField order.
const std::vector<FieldInfo>& Fields();
// Section names, in order ("job", "model", ...).
const std::vector<std::string>& Sections();
bool IsSection(std::string_view name);
// nullptr when section.key is not a key.
const FieldInfo* FindField(std::string_view section, std::string_view key);

// A value of a field, already of the field's kind.
using FieldValue = std::variant<int, std::uint64_t, double, bool, std::string>;

// Reads / writes section.key of `spec`. The key must exist (FindField) and, for Set,
// `value` must be of its kind; both are programming errors otherwise (abort).
FieldValue GetField(const JobSpec& spec, std::string_view section, std::string_view key);
void SetField(JobSpec& spec, std::string_view section, std::string_view key, const FieldValue& value);

// " (did you mean model.dim?)" for a near miss (edit distance <= 2) among the keys of
// `section` (or among section names when `section` is empty), else "".
std::string Suggestion(std::string_view section, std::string_view name);
// "job, model, training, ...".
std::string KnownSections();

// The value in words for messages: 20, 0.0008, true, "softmax" (quoted, capped).
std::string ToText(const FieldValue& value);

}  // namespace trainyard::spec
