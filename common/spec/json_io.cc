#include "common/spec/json_io.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>

#include <nlohmann/json.hpp>

namespace trainyard::spec {
namespace {

using nlohmann::json;

const char* JsonKind(const json& v) {
  if (v.is_number_integer()) return "integer";
  if (v.is_number_float()) return "float";
  if (v.is_boolean()) return "boolean";
  if (v.is_string()) return "string";
  if (v.is_object()) return "object";
  if (v.is_array()) return "array";
  return "null";
}

// A decimal integer string (proto3 JSON's spelling of 64-bit integers).
std::optional<std::int64_t> IntegerString(const std::string& s) {
  if (s.empty() || s.size() > 20) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (errno != 0 || end != s.c_str() + s.size()) return std::nullopt;
  return v;
}

std::optional<std::uint64_t> UnsignedString(const std::string& s) {
  if (s.empty() || s.size() > 20 || s.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(s.c_str(), &end, 10);
  if (errno != 0 || end != s.c_str() + s.size()) return std::nullopt;
  return v;
}

std::optional<double> FloatString(const std::string& s) {
  if (s == "NaN") return std::numeric_limits<double>::quiet_NaN();
  if (s == "Infinity") return std::numeric_limits<double>::infinity();
  if (s == "-Infinity") return -std::numeric_limits<double>::infinity();
  if (s.empty() || s.size() > 64) return std::nullopt;
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (end != s.c_str() + s.size()) return std::nullopt;
  return v;
}

// The raw value of `v` for `field`, or nullopt for a JSON type no spelling allows.
std::optional<RawValue> ToRaw(const json& v, const FieldInfo& field) {
  if (v.is_number_unsigned() &&
      v.get<std::uint64_t>() > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
    // Beyond int64 (seed is handled before this): out of range for every other field.
    return RawValue{std::numeric_limits<std::int64_t>::max(), std::nullopt};
  }
  if (v.is_number_integer()) return RawValue{v.get<std::int64_t>(), std::nullopt};
  if (v.is_number_float()) return RawValue{v.get<double>(), std::nullopt};
  if (v.is_boolean()) return RawValue{v.get<bool>(), std::nullopt};
  if (!v.is_string()) return std::nullopt;
  const std::string s = v.get<std::string>();
  if (field.kind == FieldKind::kInt32 || field.kind == FieldKind::kUint64) {
    if (auto i = IntegerString(s)) return RawValue{*i, std::nullopt};
  }
  if (field.kind == FieldKind::kDouble) {
    if (auto d = FloatString(s)) return RawValue{*d, std::nullopt};
  }
  return RawValue{s, std::nullopt};
}

}  // namespace

Result<SpecInput> ParseJson(std::string_view text, std::string_view source_name) {
  const std::string origin(source_name);
  json root;
  try {
    root = json::parse(text.begin(), text.end());
  } catch (const json::exception& e) {
    // Any parse failure (syntax, or a number such as 1e999 that overflows a double).
    // The library's text repeats the token it stopped at, so it is quoted and capped.
    SpecError err = Invalid("", "syntax", "not valid JSON: " + Quote(e.what()));
    err.origin = origin;
    return err;
  }
  if (!root.is_object()) {
    SpecError err = Invalid("", "syntax", std::string("expected a JSON object of sections, got ") + JsonKind(root));
    err.origin = origin;
    return err;
  }
  // Unknown sections and keys first, then the values in schema order, so that of
  // several bad values the same one is reported as from a proto or a TOML file.
  for (const auto& [section, body] : root.items()) {
    if (!IsSection(section)) {
      SpecError e = UnknownSection(section);
      e.origin = origin;
      return e;
    }
    if (body.is_null()) continue;
    if (!body.is_object()) {
      SpecError e = Invalid(section, "type", section + ": expected an object, got " + JsonKind(body));
      e.origin = origin;
      return e;
    }
    for (const auto& [key, value] : body.items()) {
      if (FindField(section, key) == nullptr) {
        SpecError e = UnknownKey(section, key);
        e.origin = origin;
        return e;
      }
    }
  }
  SpecInput input;
  for (const FieldInfo& f : Fields()) {
    const auto section = root.find(f.section);
    if (section == root.end() || section->is_null()) continue;
    const auto found = section->find(f.key);
    if (found == section->end() || found->is_null()) continue;  // proto3 JSON: null means not set
    const json& value = *found;
    if (f.kind == FieldKind::kUint64) {
      // seed: the full unsigned range, as a number or as proto3 JSON's decimal string.
      std::optional<std::uint64_t> u;
      if (value.is_number_unsigned()) u = value.get<std::uint64_t>();
      if (value.is_string()) u = UnsignedString(value.get<std::string>());
      if (u) {
        if (auto e = input.SetTyped(f.section, f.key, FieldValue{*u}, origin)) return *e;
        continue;
      }
    }
    std::optional<RawValue> raw = ToRaw(value, f);
    if (!raw) {
      SpecError e = Invalid(f.path(), "type", f.path() + ": expected " + KindName(f.kind) + ", got " + JsonKind(value));
      e.origin = origin;
      return e;
    }
    if (auto e = input.Set(f.section, f.key, *raw, origin)) return *e;
  }
  return input;
}

std::string ToJson(const JobSpec& spec) {
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  ForEachField(spec, [&](const char* section, const char* key, const auto& member) {
    using T = std::decay_t<decltype(member)>;
    if constexpr (std::is_same_v<T, std::uint64_t>) {
      out[section][key] = std::to_string(member);
    } else {
      out[section][key] = member;
    }
  });
  return out.dump();
}

}  // namespace trainyard::spec
