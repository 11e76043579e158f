#include "common/spec/spec_input.h"

#include <cmath>
#include <limits>

namespace trainyard::spec {
namespace {

std::string Path(std::string_view section, std::string_view key) {
  return std::string(section) + "." + std::string(key);
}

SpecError TypeError(const FieldInfo& field, const std::string& got) {
  return Invalid(field.path(), "type",
                 field.path() + ": expected " + KindName(field.kind) + ", got " + got);
}

std::string DoubleText(double v) { return ToText(FieldValue{v}); }

}  // namespace

const char* RawKindName(const RawValue& raw) {
  switch (raw.value.index()) {
    case 0:
      return "integer";
    case 1:
      return "float";
    case 2:
      return "boolean";
    default:
      return "string";
  }
}

SpecError UnknownKey(std::string_view section, std::string_view key) {
  const std::string shown = Path(Quote(section), Quote(key));
  return Invalid(Path(section, key), "unknown_key", "unknown key " + shown + Suggestion(section, key));
}

SpecError UnknownSection(std::string_view section) {
  return Invalid(std::string(section), "unknown_key",
                 "unknown section [" + Quote(section) + "]" + Suggestion("", section) + " (known: " +
                     KnownSections() + ")");
}

std::optional<SpecError> SpecInput::Set(std::string_view section, std::string_view key, const RawValue& raw,
                                        const std::string& origin) {
  const FieldInfo* field = FindField(section, key);
  if (field == nullptr) {
    SpecError e = IsSection(section) ? UnknownKey(section, key) : UnknownSection(section);
    e.origin = origin;
    return e;
  }
  auto fail = [&](SpecError e) {
    e.origin = origin;
    return std::optional<SpecError>(std::move(e));
  };
  const auto* i = std::get_if<std::int64_t>(&raw.value);
  const auto* d = std::get_if<double>(&raw.value);
  const auto* b = std::get_if<bool>(&raw.value);
  const auto* s = std::get_if<std::string>(&raw.value);
  switch (field->kind) {
    case FieldKind::kInt32:
      if (i == nullptr) return fail(TypeError(*field, RawKindName(raw)));
      if (*i < std::numeric_limits<std::int32_t>::min() || *i > std::numeric_limits<std::int32_t>::max()) {
        return fail(Invalid(field->path(), "type",
                            field->path() + ": " + std::to_string(*i) +
                                " is out of range (must fit in a 32-bit signed integer, -2147483648 to "
                                "2147483647)"));
      }
      return Store(*field, static_cast<int>(*i), origin);
    case FieldKind::kUint64:
      if (i == nullptr) return fail(TypeError(*field, RawKindName(raw)));
      if (*i < 0) {
        return fail(Invalid(field->path(), "type",
                            field->path() + ": " + std::to_string(*i) +
                                " is out of range (must be a non-negative integer)"));
      }
      return Store(*field, static_cast<std::uint64_t>(*i), origin);
    case FieldKind::kDouble:
      if (i != nullptr) return Store(*field, static_cast<double>(*i), origin);
      if (d == nullptr) return fail(TypeError(*field, RawKindName(raw)));
      return Store(*field, *d, origin);
    case FieldKind::kBool:
      if (b == nullptr) return fail(TypeError(*field, RawKindName(raw)));
      return Store(*field, *b, origin);
    case FieldKind::kString:
      if (s != nullptr) return Store(*field, *s, origin);
      if (raw.literal.has_value()) return Store(*field, *raw.literal, origin);
      return fail(TypeError(*field, RawKindName(raw)));
  }
  return fail(TypeError(*field, RawKindName(raw)));
}

std::optional<SpecError> SpecInput::SetTyped(std::string_view section, std::string_view key,
                                             const FieldValue& value, const std::string& origin) {
  const FieldInfo* field = FindField(section, key);
  if (field == nullptr) {
    SpecError e = IsSection(section) ? UnknownKey(section, key) : UnknownSection(section);
    e.origin = origin;
    return e;
  }
  RawValue raw;
  if (const int* i = std::get_if<int>(&value)) {
    raw.value = static_cast<std::int64_t>(*i);
  } else if (const auto* u = std::get_if<std::uint64_t>(&value)) {
    if (field->kind == FieldKind::kUint64) return Store(*field, *u, origin);
    if (*u > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
      SpecError e = Invalid(field->path(), "type",
                            field->path() + ": " + std::to_string(*u) + " is out of range (must fit in a 32-bit signed integer)");
      e.origin = origin;
      return e;
    }
    raw.value = static_cast<std::int64_t>(*u);
  } else if (const double* d = std::get_if<double>(&value)) {
    raw.value = *d;
  } else if (const bool* b = std::get_if<bool>(&value)) {
    raw.value = *b;
  } else {
    raw.value = std::get<std::string>(value);
  }
  return Set(section, key, raw, origin);
}

std::optional<SpecError> SpecInput::Store(const FieldInfo& field, FieldValue value, const std::string& origin) {
  // -0 is 0 here: JSON readers drop the sign of zero, so keeping it would make the
  // same spec differ by the path it took.
  if (double* d = std::get_if<double>(&value); d != nullptr && *d == 0) *d = 0.0;
  if (const double* d = std::get_if<double>(&value); d != nullptr && !std::isfinite(*d)) {
    SpecError e = Invalid(field.path(), "type", field.path() + ": expected a finite number, got " + DoubleText(*d));
    e.origin = origin;
    return e;
  }
  for (Assignment& a : assignments_) {
    if (a.field == &field) {
      a.value = std::move(value);
      a.origin = origin;
      return std::nullopt;
    }
  }
  assignments_.push_back({&field, std::move(value), origin});
  return std::nullopt;
}

const Assignment* SpecInput::Find(std::string_view section, std::string_view key) const {
  for (const Assignment& a : assignments_) {
    if (a.field->section == section && a.field->key == key) return &a;
  }
  return nullptr;
}

std::string SpecInput::OriginOf(std::string_view path) const {
  for (const Assignment& a : assignments_) {
    if (a.field->path() == path) return a.origin;
  }
  return "";
}

}  // namespace trainyard::spec
