#include "common/spec/sweep_reader.h"

#include <algorithm>
#include <functional>
#include <tuple>
#include <utility>

#include "common/spec/hf_config.h"
#include "common/spec/job_file_reader.h"
#include "common/spec/overrides.h"

#if TRAINYARD_HAVE_TOMLPP
#include <toml++/toml.h>

#include "common/spec/toml_type_name.h"
#endif

namespace trainyard::spec {
namespace {

constexpr const char* kTable = "sweep";

SpecError At(SpecError e, const std::string& origin) {
  e.origin = origin;
  return e;
}

// An axis whose key is checked but whose values are not read yet: they are read only
// once the number of points is known to be within the limit.
struct PendingAxis {
  const FieldInfo* field = nullptr;
  std::string label;
  std::string origin;
  std::size_t size = 0;
  std::function<Result<std::vector<RawValue>>()> read;
};

std::string_view Trim(std::string_view s) {
  const auto first = s.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos) return {};
  const auto last = s.find_last_not_of(" \t\r\n");
  return s.substr(first, last - first + 1);
}

// The quoting state after `c`: 0 outside a string, '"' or '\'' inside a basic or a
// literal TOML string, '\\' just after a backslash inside a basic string.
char QuoteState(char state, char c) {
  if (state == '\\') return '"';
  if (state == '"' && c == '\\') return '\\';
  if (state != 0) return c == state ? 0 : state;
  return (c == '"' || c == '\'') ? c : 0;
}

// Calls visit(value) for each value of "a, b,\"c,d\",'e,f'" -> a | b | "c,d" | 'e,f'
// (trimmed): commas inside TOML strings do not split. False, having visited nothing,
// when a quote is not closed. Nothing is allocated, so a list of millions of values
// is counted before any is kept.
template <class Visit>
bool ForEachValue(std::string_view list, Visit&& visit) {
  char state = 0;
  for (char c : list) state = QuoteState(state, c);
  if (state != 0) return false;
  std::size_t start = 0;
  for (std::size_t i = 0; i < list.size(); ++i) {
    const bool outside = state == 0;
    state = QuoteState(state, list[i]);
    if (outside && list[i] == ',') {
      visit(Trim(list.substr(start, i - start)));
      start = i + 1;
    }
  }
  visit(Trim(list.substr(start)));
  return true;
}

// One --sweep flag up to its values: the key checked, the values split (not read).
Result<PendingAxis> ParseFlag(const std::string& text) {
  const std::string syntax = "expected section.key=V1,V2,... (e.g. training.lr=1e-4,3e-4)";
  const std::size_t eq = text.find('=');
  if (eq == std::string::npos) {
    return Invalid("", "syntax", "--sweep \"" + Quote(text) + "\": " + syntax);
  }
  const std::string_view all(text);
  const std::string_view path = Trim(all.substr(0, eq));
  const std::string label = "--sweep " + Quote(path);
  const std::size_t dot = path.find('.');
  if (dot == std::string_view::npos && IsSection(path)) {
    return Invalid(
        std::string(path), "syntax",
        label + ": " + std::string(path) + " is a section, not a key; sweep one of its keys (" + syntax + ")");
  }
  if (dot == std::string_view::npos || dot == 0 || dot + 1 == path.size() ||
      path.find('.', dot + 1) != std::string_view::npos) {
    return Invalid("", "syntax", label + ": " + syntax);
  }
  Result<const FieldInfo*> field = SweepableField(path.substr(0, dot), path.substr(dot + 1), label, "");
  if (!field.ok()) return field.error();
  const std::string key = field.value()->path();
  const std::string_view list = Trim(all.substr(eq + 1));
  if (list.empty()) return Invalid(key, "length", label + ": no values (a swept key needs at least one)");
  if (list.front() == '[') {
    return Invalid(key, "syntax", label + ": values are a plain comma list, without brackets (" + syntax + ")");
  }
  std::size_t count = 0;
  std::size_t first_empty = 0;  // 1-based; 0: none
  const bool closed = ForEachValue(list, [&](std::string_view v) {
    ++count;
    if (v.empty() && first_empty == 0) first_empty = count;
  });
  if (!closed) return Invalid(key, "syntax", label + ": a quoted value is not closed");
  if (first_empty != 0) {
    return Invalid(key, "syntax",
                   label + ": value " + std::to_string(first_empty) + " of " + std::to_string(count) +
                       " is empty (write \"\" for an empty string)");
  }
  PendingAxis axis;
  axis.field = field.value();
  axis.label = label;
  axis.size = count;
  // `list` views the caller's flag, which outlives the pending axis.
  axis.read = [list]() -> Result<std::vector<RawValue>> {
    std::vector<RawValue> raw;
    ForEachValue(list, [&](std::string_view v) { raw.push_back(ParseOverrideValue(v)); });
    return raw;
  };
  return axis;
}

#if TRAINYARD_HAVE_TOMLPP

std::string PositionOf(std::string_view source, const toml::source_position& at) {
  return std::string(source) + ":" + std::to_string(at.line) + ":" + std::to_string(at.column);
}

// The values of one [sweep] array as a reader found them (not yet typed by the key).
Result<std::vector<RawValue>> ReadArray(const toml::array& array, const FieldInfo& field) {
  std::vector<RawValue> raw;
  raw.reserve(array.size());
  for (std::size_t i = 0; i < array.size(); ++i) {
    const toml::node& e = *array.get(i);
    if (auto x = e.as_integer()) {
      raw.push_back({x->get(), std::nullopt});
    } else if (auto d = e.as_floating_point()) {
      raw.push_back({d->get(), std::nullopt});
    } else if (auto b = e.as_boolean()) {
      raw.push_back({b->get(), std::nullopt});
    } else if (auto t = e.as_string()) {
      raw.push_back({t->get(), std::nullopt});
    } else {
      return Invalid(field.path(), "type",
                     "value " + std::to_string(i + 1) + " of " + std::to_string(array.size()) + ": expected " +
                         KindName(field.kind) + ", got " + TomlTypeName(e.type()));
    }
  }
  return raw;
}

// The [sweep] table's settings and axes (values unread), in file order.
struct TableSweep {
  bool present = false;
  std::optional<std::int64_t> max_concurrent;
  std::string max_concurrent_origin;
  std::vector<PendingAxis> axes;
};

// One key of the [sweep] table: a setting (`section` empty) or section.key.
struct TableEntry {
  toml::source_position at;
  std::string section;
  std::string key;
  const toml::node* value = nullptr;
};

// The entry's problem when it is not a setting of the table, or nullopt.
std::optional<SpecError> SettingError(const TableEntry& e, const std::string& origin, TableSweep& out) {
  if (e.key == "max_concurrent") {
    const auto* i = e.value->as_integer();
    if (i == nullptr) {
      return At(Invalid("sweep.max_concurrent", "type",
                        std::string("sweep.max_concurrent: expected integer, got ") + TomlTypeName(e.value->type())),
                origin);
    }
    out.max_concurrent = i->get();
    out.max_concurrent_origin = origin;
    return std::nullopt;
  }
  std::string why;
  if (IsSection(e.key)) {
    why = e.key + " is a section, not a key; sweep its keys (" + e.key + ".KEY = [V1, V2])";
  } else if (e.key.find('.') != std::string::npos) {
    why = "a quoted key; write the swept key without quotes (training.lr = [1e-4, 3e-4])";
  } else {
    why = "unknown key (the [sweep] table holds max_concurrent and section.key = [V1, V2] entries)";
  }
  return At(Invalid("sweep." + e.key, "unknown_key", "sweep." + Quote(e.key) + ": " + why), origin);
}

Result<TableSweep> ReadTable(std::string_view source, const toml::table& root) {
  TableSweep out;
  const toml::node* node = root.get(kTable);
  if (node == nullptr) return out;
  out.present = true;
  if (!node->is_table()) {
    return At(
        Invalid("sweep", "type", std::string("sweep: expected a table ([sweep]), got ") + TomlTypeName(node->type())),
        PositionOf(source, node->source().begin));
  }
  std::vector<TableEntry> entries;
  for (auto&& [key, value] : *node->as_table()) {
    if (!value.is_table()) {
      entries.push_back({key.source().begin, "", std::string(key.str()), &value});
      continue;
    }
    for (auto&& [leaf, values] : *value.as_table()) {
      entries.push_back({leaf.source().begin, std::string(key.str()), std::string(leaf.str()), &values});
    }
  }
  // toml++ iterates keys by name; axes go in file order, and the first problem
  // reported is the first in the file.
  std::stable_sort(entries.begin(), entries.end(), [](const TableEntry& a, const TableEntry& b) {
    return std::tie(a.at.line, a.at.column) < std::tie(b.at.line, b.at.column);
  });
  for (const TableEntry& e : entries) {
    const std::string origin = PositionOf(source, e.at);
    if (e.section.empty()) {
      if (auto err = SettingError(e, origin, out)) return *err;
      continue;
    }
    const std::string label = "sweep." + Quote(e.section) + "." + Quote(e.key);
    Result<const FieldInfo*> field = SweepableField(e.section, e.key, label, origin);
    if (!field.ok()) return field.error();
    const toml::array* array = e.value->as_array();
    if (array == nullptr) {
      return At(Invalid(field.value()->path(), "type",
                        label + ": expected an array of values (" + e.key + " = [V1, V2]), got " +
                            TomlTypeName(e.value->type())),
                origin);
    }
    PendingAxis axis;
    axis.field = field.value();
    axis.label = label;
    axis.origin = origin;
    axis.size = array->size();
    axis.read = [array, f = field.value()] { return ReadArray(*array, *f); };
    out.axes.push_back(std::move(axis));
  }
  return out;
}

#endif

// The fields given by --set, to refuse a key that is both set and swept.
std::vector<const FieldInfo*> SetFields(const std::vector<std::string>& overrides) {
  std::vector<const FieldInfo*> out;
  for (const std::string& o : overrides) {
    SpecInput one;
    // Every override applied without error to the base already.
    if (!ApplyOverride(o, one) && !one.assignments().empty()) out.push_back(one.assignments().front().field);
  }
  return out;
}

}  // namespace

Result<SweepJob> ParseSweepJobText(std::string_view text, std::string_view source_name,
                                   const std::vector<std::string>& overrides, const SweepFlags& flags,
                                   std::size_t max_points) {
  Result<SpecInput> base = ParseJobText(text, source_name, overrides, kTable);
  if (!base.ok()) return base.error();
  // A Hugging Face folder as initial weights gives the model keys, as LoadJobFile does.
  if (auto e = ApplyHuggingFaceFolder(base.value())) return *e;
  SweepJob job;
  job.base = std::move(base).value();

  std::vector<PendingAxis> pending;
  bool table_present = false;
  std::optional<std::int64_t> max_concurrent = flags.max_concurrent;
  std::string max_concurrent_label = "--max-concurrent";
  std::string max_concurrent_origin;
#if TRAINYARD_HAVE_TOMLPP
  // Parsed again for the table ParseToml skipped (a job file is at most 1 MiB, and
  // toml++'s tree stays out of the spec headers); the same text parsed above, so this
  // does not throw.
  std::optional<toml::table> root;
  if (!IsJsonJobText(source_name, text)) {
    root = toml::parse(text, source_name);
    Result<TableSweep> table = ReadTable(source_name, *root);
    if (!table.ok()) return table.error();
    table_present = table.value().present;
    pending = std::move(table.value().axes);
    if (!max_concurrent && table.value().max_concurrent) {
      max_concurrent = table.value().max_concurrent;
      max_concurrent_label = "sweep.max_concurrent";
      max_concurrent_origin = table.value().max_concurrent_origin;
    }
  }
#endif
  for (const std::string& flag : flags.sweeps) {
    Result<PendingAxis> axis = ParseFlag(flag);
    if (!axis.ok()) return axis.error();
    pending.push_back(std::move(axis).value());
  }

  const std::vector<const FieldInfo*> set_fields = SetFields(overrides);
  for (std::size_t i = 0; i < pending.size(); ++i) {
    const PendingAxis& a = pending[i];
    const std::string path = a.field->path();
    if (a.size == 0) {
      return At(Invalid(path, "length", a.label + ": no values (a swept key needs at least one)"), a.origin);
    }
    for (std::size_t j = 0; j < i; ++j) {
      if (pending[j].field == a.field) {
        const std::string first =
            pending[j].origin.empty() ? pending[j].label : pending[j].origin + " (" + pending[j].label + ")";
        return At(Invalid(path, "duplicate", a.label + ": " + path + " is swept twice; first by " + first), a.origin);
      }
    }
    if (std::find(set_fields.begin(), set_fields.end(), a.field) != set_fields.end()) {
      return At(
          Invalid(path, "duplicate", a.label + ": " + path + " is also given by --set; a key is either set or swept"),
          a.origin);
    }
  }
  if (pending.empty()) {
    if (table_present) {
      return Invalid("sweep", "length",
                     std::string(source_name) + ": the [sweep] table sweeps no key (add section.key = [V1, V2])");
    }
    if (max_concurrent) {
      return Invalid("sweep.max_concurrent", "requires",
                     max_concurrent_label + " needs a sweep (--sweep section.key=V1,V2 or a [sweep] table)");
    }
    return job;
  }

  // The limit is checked on the number of values alone: 10^6 points are refused
  // before one value is read.
  std::vector<SweepAxisSize> sizes;
  for (const PendingAxis& a : pending) sizes.push_back({a.field->path(), a.size});
  Result<std::size_t> count = CountSweepPoints(sizes, max_points);
  if (!count.ok()) return count.error();

  for (const PendingAxis& a : pending) {
    Result<std::vector<RawValue>> raw = a.read();
    if (!raw.ok()) {
      SpecError e = raw.error();
      e.message = a.label + ": " + e.message;
      return At(std::move(e), a.origin);
    }
    if (auto e = AddSweepAxis(job.sweep, *a.field, raw.value(), a.label, a.origin)) return *e;
  }
  if (max_concurrent) {
    if (auto e = SetSweepMaxConcurrent(job.sweep, *max_concurrent, max_concurrent_label, max_concurrent_origin)) {
      return *e;
    }
  }
  return job;
}

Result<SweepJob> LoadSweepJobFile(const std::string& path, const std::vector<std::string>& overrides,
                                  const SweepFlags& flags, std::size_t max_points) {
  Result<std::string> text = ReadJobFile(path);
  if (!text.ok()) return text.error();
  return ParseSweepJobText(text.value(), path, overrides, flags, max_points);
}

}  // namespace trainyard::spec
