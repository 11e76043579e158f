#include "common/spec/overrides.h"

#include <string>

#if TRAINYARD_HAVE_TOMLPP
#include <toml++/toml.h>
#else
#include <nlohmann/json.hpp>
#endif

namespace trainyard::spec {
namespace {

std::string_view Trim(std::string_view s) {
  const auto first = s.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos) return {};
  const auto last = s.find_last_not_of(" \t\r\n");
  return s.substr(first, last - first + 1);
}

// The scalar the value text spells, or nullopt when it is not exactly one scalar.
std::optional<RawValue> ParseScalar(std::string_view value) {
#if TRAINYARD_HAVE_TOMLPP
  toml::table doc;
  try {
    doc = toml::parse("v = " + std::string(value) + "\n", std::string_view("--set"));
  } catch (const toml::parse_error&) {
    return std::nullopt;
  }
  const toml::node* node = doc.size() == 1 ? doc.get("v") : nullptr;
  if (node == nullptr) return std::nullopt;
  if (auto v = node->as_integer()) return RawValue{v->get(), std::nullopt};
  if (auto v = node->as_floating_point()) return RawValue{v->get(), std::nullopt};
  if (auto v = node->as_boolean()) return RawValue{v->get(), std::nullopt};
  if (auto v = node->as_string()) return RawValue{v->get(), std::nullopt};
  return std::nullopt;
#else
  const nlohmann::json v = nlohmann::json::parse(value, nullptr, /*allow_exceptions=*/false);
  if (v.is_number_integer()) return RawValue{v.get<std::int64_t>(), std::nullopt};
  if (v.is_number_float()) return RawValue{v.get<double>(), std::nullopt};
  if (v.is_boolean()) return RawValue{v.get<bool>(), std::nullopt};
  if (v.is_string()) return RawValue{v.get<std::string>(), std::nullopt};
  return std::nullopt;
#endif
}

}  // namespace

RawValue ParseOverrideValue(std::string_view value) {
  value = Trim(value);
  RawValue raw = ParseScalar(value).value_or(RawValue{std::string(value), std::nullopt});
  raw.literal = std::string(value);
  return raw;
}

std::optional<SpecError> ApplyOverride(std::string_view text, SpecInput& input) {
  const std::size_t eq = text.find('=');
  if (eq == std::string_view::npos) {
    return Invalid("", "syntax", "--set " + Quote(text) + ": expected section.key=value");
  }
  const std::string_view path = Trim(text.substr(0, eq));
  const std::string_view value = Trim(text.substr(eq + 1));
  const std::string label = "--set " + Quote(path);
  const std::size_t dot = path.find('.');
  if (dot == std::string_view::npos || dot == 0 || dot + 1 == path.size() ||
      path.find('.', dot + 1) != std::string_view::npos) {
    return Invalid("", "syntax", label + ": expected section.key=value (e.g. training.steps=20)");
  }
  const std::string_view section = path.substr(0, dot);
  const std::string_view key = path.substr(dot + 1);
  if (!IsSection(section)) {
    SpecError e = UnknownSection(section);
    e.message = label + ": " + e.message;
    return e;
  }
  if (FindField(section, key) == nullptr) {
    SpecError e = UnknownKey(section, key);
    e.message = label + ": " + e.message;
    return e;
  }
  const RawValue raw = ParseOverrideValue(value);
  // A value that is set but breaks a rule later is reported as coming from this flag.
  if (auto e = input.Set(section, key, raw, "--set " + Quote(text))) {
    // "--set training.steps: expected integer, got string": the message already
    // starts with the field; put the flag in front of it.
    e->origin.clear();
    e->message = "--set " + e->message;
    return e;
  }
  return std::nullopt;
}

}  // namespace trainyard::spec
