// What a job file, a --set flag, a JSON document or a submitted proto said: the keys
// that were given, each converted to its field's kind, with where it came from. Keys
// not given are decided later by spec::Resolve (preset, then defaults).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "common/spec/schema.h"
#include "common/spec/spec_error.h"

namespace trainyard::spec {

// A value as a reader found it, before it meets the field's kind.
struct RawValue {
  std::variant<std::int64_t, double, bool, std::string> value;
  // For --set: the text after '=' exactly as typed. A string field takes it literally
  // when the text is not a quoted TOML string (--set job.name=123 means "123").
  std::optional<std::string> literal;
};

// "integer", "float", "boolean", "string".
const char* RawKindName(const RawValue& raw);

struct Assignment {
  const FieldInfo* field;
  FieldValue value;
  std::string origin;
};

// Not thread-safe; a value type.
class SpecInput {
 public:
  // Checks section.key against the schema and converts `raw` to the field's kind:
  // integers must fit the field (32-bit signed, or unsigned 64-bit for seed), floats
  // must be finite (an integer is taken as a float), booleans and strings must be
  // exactly that. A later Set of the same key replaces the earlier one. On error
  // nothing is stored; the error carries `origin` and names the field.
  std::optional<SpecError> Set(std::string_view section, std::string_view key, const RawValue& raw,
                               const std::string& origin);

  // Assigns an already-typed value (the proto mapping). Same checks as Set.
  std::optional<SpecError> SetTyped(std::string_view section, std::string_view key, const FieldValue& value,
                                    const std::string& origin);

  const std::vector<Assignment>& assignments() const { return assignments_; }
  const Assignment* Find(std::string_view section, std::string_view key) const;
  // Origin of "section.key" if given, else "".
  std::string OriginOf(std::string_view path) const;

 private:
  std::optional<SpecError> Store(const FieldInfo& field, FieldValue value, const std::string& origin);
  std::vector<Assignment> assignments_;
};

// The error for a key that is not in the schema, with a suggestion for typos.
SpecError UnknownKey(std::string_view section, std::string_view key);
SpecError UnknownSection(std::string_view section);

}  // namespace trainyard::spec
