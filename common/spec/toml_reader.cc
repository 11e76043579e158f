#include "common/spec/toml_reader.h"

#include <algorithm>
#include <string>
#include <tuple>
#include <vector>

#if TRAINYARD_HAVE_TOMLPP
#include <toml++/toml.h>
#include "common/spec/toml_type_name.h"
#endif

namespace trainyard::spec {

#if TRAINYARD_HAVE_TOMLPP
namespace {

// A problem kept with its position, so the earliest one is reported (toml++ tables
// iterate in key order, not file order).
struct Problem {
  std::uint32_t line = 0;
  std::uint32_t column = 0;
  SpecError error;
};


std::string Position(std::string_view source, const toml::source_position& p) {
  return std::string(source) + ":" + std::to_string(p.line) + ":" + std::to_string(p.column);
}

}  // namespace

bool HaveToml() { return true; }

Result<SpecInput> ParseToml(std::string_view text, std::string_view source_name,
                            std::string_view reserved_table) {
  toml::table root;
  try {
    root = toml::parse(text, source_name);
  } catch (const toml::parse_error& e) {
    // toml++'s text can repeat a key or value from the file: quoted and capped.
    SpecError err = Invalid("", "syntax", Quote(e.description()));
    err.origin = Position(source_name, e.source().begin);
    return err;
  }
  SpecInput input;
  std::vector<Problem> problems;
  auto add = [&](const toml::source_region& where, SpecError e) {
    e.origin = Position(source_name, where.begin);
    problems.push_back({where.begin.line, where.begin.column, std::move(e)});
  };
  for (auto&& [section_key, section_node] : root) {
    const std::string section(section_key.str());
    if (!reserved_table.empty() && section == reserved_table) continue;
    if (!IsSection(section)) {
      if (section_node.is_table()) {
        add(section_key.source(), UnknownSection(section));
      } else {
        add(section_key.source(), Invalid(section, "unknown_key",
                                          "unknown key " + Quote(section) +
                                              " (keys belong in a section such as [job] or [training])"));
      }
      continue;
    }
    if (!section_node.is_table()) {
      add(section_node.source(),
          Invalid(section, "type", section + ": expected table, got " + TomlTypeName(section_node.type())));
      continue;
    }
    for (auto&& [key, node] : *section_node.as_table()) {
      const std::string name(key.str());
      const FieldInfo* field = FindField(section, name);
      if (field == nullptr) {
        add(key.source(), UnknownKey(section, name));
        continue;
      }
      RawValue raw;
      if (auto v = node.as_integer()) {
        raw.value = v->get();
      } else if (auto f = node.as_floating_point()) {
        raw.value = f->get();
      } else if (auto b = node.as_boolean()) {
        raw.value = b->get();
      } else if (auto s = node.as_string()) {
        raw.value = s->get();
      } else {
        add(node.source(), Invalid(field->path(), "type",
                                   field->path() + ": expected " + KindName(field->kind) + ", got " +
                                       TomlTypeName(node.type())));
        continue;
      }
      // The key's origin is its value's position, for errors found after resolving.
      if (auto e = input.Set(section, name, raw, Position(source_name, node.source().begin))) {
        add(node.source(), std::move(*e));
      }
    }
  }
  if (problems.empty()) return input;
  std::stable_sort(problems.begin(), problems.end(), [](const Problem& a, const Problem& b) {
    return std::tie(a.line, a.column) < std::tie(b.line, b.column);
  });
  SpecError first = problems.front().error;
  if (problems.size() > 1) {
    first.message += " (and " + std::to_string(problems.size() - 1) + " more problem" +
                     (problems.size() > 2 ? "s" : "") + ")";
  }
  return first;
}

#else

bool HaveToml() { return false; }

Result<SpecInput> ParseToml(std::string_view, std::string_view source_name, std::string_view) {
  return Invalid("", "syntax",
                 std::string(source_name) +
                     ": this build has no TOML support (toml++ was not found); use a JSON job file");
}

#endif

}  // namespace trainyard::spec
