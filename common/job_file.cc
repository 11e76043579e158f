#include "common/job_file.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/message.h>
#include <toml++/toml.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <limits>
#include <optional>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"

namespace trainyard {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

// A problem found in a file, kept with its position so the earliest one is reported
// (toml++ tables iterate in key order, not file order).
absl::string_view Sv(std::string_view s) { return absl::string_view(s.data(), s.size()); }

struct Problem {
  uint32_t line = 0;
  uint32_t column = 0;
  std::string message;
};

absl::string_view TypeName(toml::node_type type) {
  switch (type) {
    case toml::node_type::table:
      return "table";
    case toml::node_type::array:
      return "array";
    case toml::node_type::string:
      return "string";
    case toml::node_type::integer:
      return "integer";
    case toml::node_type::floating_point:
      return "float";
    case toml::node_type::boolean:
      return "boolean";
    case toml::node_type::date:
      return "date";
    case toml::node_type::time:
      return "time";
    case toml::node_type::date_time:
      return "date-time";
    case toml::node_type::none:
      break;
  }
  return "nothing";
}

// The TOML type a field expects, in the words of the error messages.
absl::string_view ExpectedTypeName(const FieldDescriptor* field) {
  switch (field->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
    case FieldDescriptor::CPPTYPE_INT64:
    case FieldDescriptor::CPPTYPE_UINT32:
    case FieldDescriptor::CPPTYPE_UINT64:
      return "integer";
    case FieldDescriptor::CPPTYPE_DOUBLE:
    case FieldDescriptor::CPPTYPE_FLOAT:
      return "float";
    case FieldDescriptor::CPPTYPE_BOOL:
      return "boolean";
    case FieldDescriptor::CPPTYPE_STRING:
      return "string";
    default:
      return "table";
  }
}

// Sets `field` of `section` from `node`. Returns the problem in words (without the
// field path), or nullopt on success. `literal_text` is the override's raw value: for
// string fields it is used when the value is not a TOML string, so --set job.name=123
// means the name "123".
std::optional<std::string> SetField(const toml::node& node, const FieldDescriptor* field,
                                    Message* section,
                                    const std::optional<std::string>& literal_text) {
  const Reflection* refl = section->GetReflection();
  auto wrong_type = [&]() -> std::optional<std::string> {
    return absl::StrCat("expected ", ExpectedTypeName(field), ", got ", TypeName(node.type()));
  };
  switch (field->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32: {
      if (!node.is_integer()) return wrong_type();
      const int64_t v = node.as_integer()->get();
      if (v < std::numeric_limits<int32_t>::min() || v > std::numeric_limits<int32_t>::max()) {
        return absl::StrCat(v, " is out of range (must fit in a 32-bit signed integer, ",
                            std::numeric_limits<int32_t>::min(), " to ",
                            std::numeric_limits<int32_t>::max(), ")");
      }
      refl->SetInt32(section, field, static_cast<int32_t>(v));
      return std::nullopt;
    }
    case FieldDescriptor::CPPTYPE_UINT64: {
      if (!node.is_integer()) return wrong_type();
      const int64_t v = node.as_integer()->get();
      if (v < 0) return absl::StrCat(v, " is out of range (must be a non-negative integer)");
      refl->SetUInt64(section, field, static_cast<uint64_t>(v));
      return std::nullopt;
    }
    case FieldDescriptor::CPPTYPE_DOUBLE: {
      double v = 0;
      if (node.is_integer()) {
        v = static_cast<double>(node.as_integer()->get());
      } else if (node.is_floating_point()) {
        v = node.as_floating_point()->get();
      } else {
        return wrong_type();
      }
      if (!std::isfinite(v)) return absl::StrCat("expected a finite number, got ", v);
      refl->SetDouble(section, field, v);
      return std::nullopt;
    }
    case FieldDescriptor::CPPTYPE_BOOL:
      if (!node.is_boolean()) return wrong_type();
      refl->SetBool(section, field, node.as_boolean()->get());
      return std::nullopt;
    case FieldDescriptor::CPPTYPE_STRING:
      if (node.is_string()) {
        refl->SetString(section, field, node.as_string()->get());
        return std::nullopt;
      }
      if (literal_text.has_value()) {
        refl->SetString(section, field, *literal_text);
        return std::nullopt;
      }
      return wrong_type();
    default:
      // spec.proto sections hold only scalars; a new kind of field needs code here.
      return absl::StrCat("fields of this type are not supported in job files");
  }
}

size_t EditDistance(absl::string_view a, absl::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

// " (did you mean X?)" for a near miss among `descriptor`'s field names, else "".
std::string Suggestion(const Descriptor* descriptor, absl::string_view name,
                       absl::string_view prefix) {
  std::string best;
  size_t best_distance = 3;  // suggest only close misses (typos)
  for (int i = 0; i < descriptor->field_count(); ++i) {
    const std::string& candidate = descriptor->field(i)->name();
    const size_t d = EditDistance(name, candidate);
    if (d < best_distance) {
      best_distance = d;
      best = candidate;
    }
  }
  if (best.empty()) return "";
  return absl::StrCat(" (did you mean ", prefix, best, "?)");
}

std::string KnownSections() {
  std::vector<std::string> names;
  const Descriptor* d = v1::JobSpec::descriptor();
  for (int i = 0; i < d->field_count(); ++i) names.push_back(d->field(i)->name());
  return absl::StrJoin(names, ", ");
}

// The section field of JobSpec named `name`, or nullptr.
const FieldDescriptor* FindSection(absl::string_view name) {
  const FieldDescriptor* f = v1::JobSpec::descriptor()->FindFieldByName(std::string(name));
  if (f == nullptr || f->cpp_type() != FieldDescriptor::CPPTYPE_MESSAGE) return nullptr;
  return f;
}

std::string UnknownSectionMessage(absl::string_view name) {
  return absl::StrCat("unknown section [", name, "]",
                      Suggestion(v1::JobSpec::descriptor(), name, ""), " (known: ", KnownSections(),
                      ")");
}

void CollectProblems(const toml::table& root, v1::JobSpec* spec, std::vector<Problem>* problems) {
  auto add = [problems](const toml::source_region& where, std::string message) {
    problems->push_back(Problem{where.begin.line, where.begin.column, std::move(message)});
  };
  for (auto&& [section_key, section_node] : root) {
    const absl::string_view section_name = Sv(section_key.str());
    const FieldDescriptor* section_field = FindSection(section_name);
    if (section_field == nullptr) {
      if (section_node.is_table()) {
        add(section_key.source(), UnknownSectionMessage(section_name));
      } else {
        add(section_key.source(),
            absl::StrCat("unknown key ", section_name,
                         " (keys belong in a section such as [job] or [training])"));
      }
      continue;
    }
    if (!section_node.is_table()) {
      add(section_node.source(),
          absl::StrCat(section_name, ": expected table, got ", TypeName(section_node.type())));
      continue;
    }
    Message* section = spec->GetReflection()->MutableMessage(spec, section_field);
    const Descriptor* section_desc = section->GetDescriptor();
    for (auto&& [key, node] : *section_node.as_table()) {
      const std::string path = absl::StrCat(section_name, ".", Sv(key.str()));
      const FieldDescriptor* field = section_desc->FindFieldByName(std::string(key.str()));
      if (field == nullptr || field->is_repeated() ||
          field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
        add(key.source(),
            absl::StrCat("unknown key ", path,
                         Suggestion(section_desc, Sv(key.str()), absl::StrCat(section_name, "."))));
        continue;
      }
      if (auto problem = SetField(node, field, section, std::nullopt)) {
        add(node.source(), absl::StrCat(path, ": ", *problem));
      }
    }
  }
}

absl::string_view Trim(absl::string_view s) { return absl::StripAsciiWhitespace(s); }

}  // namespace

absl::Status ApplyOverride(std::string_view override_text_std, v1::JobSpec* spec) {
  const absl::string_view override_text = Sv(override_text_std);
  const size_t eq = override_text.find('=');
  if (eq == absl::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("--set ", override_text, ": expected section.key=value"));
  }
  const absl::string_view path = Trim(override_text.substr(0, eq));
  const absl::string_view value = Trim(override_text.substr(eq + 1));
  const std::string label = absl::StrCat("--set ", path);
  std::vector<absl::string_view> parts = absl::StrSplit(path, '.');
  if (parts.size() != 2 || parts[0].empty() || parts[1].empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(label, ": expected section.key=value (e.g. training.steps=20)"));
  }
  const FieldDescriptor* section_field = FindSection(parts[0]);
  if (section_field == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(label, ": ", UnknownSectionMessage(parts[0])));
  }
  Message* section = spec->GetReflection()->MutableMessage(spec, section_field);
  const Descriptor* section_desc = section->GetDescriptor();
  const FieldDescriptor* field = section_desc->FindFieldByName(std::string(parts[1]));
  if (field == nullptr || field->is_repeated() ||
      field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
    return absl::InvalidArgumentError(
        absl::StrCat(label, ": unknown key ", path,
                     Suggestion(section_desc, parts[1], absl::StrCat(parts[0], "."))));
  }

  // Parse the value as the right-hand side of a one-key document. Anything that does
  // not come back as exactly that one value (a bare word, a stray newline) is a string.
  std::optional<toml::table> parsed;
  try {
    const std::string doc = absl::StrCat("v = ", value, "\n");
    parsed = toml::parse(std::string_view(doc), std::string_view("--set"));
  } catch (const toml::parse_error&) {
    parsed.reset();
  }
  const toml::node* node = nullptr;
  toml::value<std::string> as_string{std::string(value)};
  if (parsed.has_value() && parsed->size() == 1 && parsed->get("v") != nullptr) {
    node = parsed->get("v");
  } else {
    node = &as_string;
  }
  if (auto problem = SetField(*node, field, section, std::string(value))) {
    return absl::InvalidArgumentError(absl::StrCat(label, ": ", *problem));
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::JobSpec> ParseJobToml(std::string_view text, std::string_view source_name_std,
                                         const std::vector<std::string>& overrides) {
  const absl::string_view source_name = Sv(source_name_std);
  if (text.size() > kMaxJobFileBytes) {
    return absl::InvalidArgumentError(absl::StrCat(source_name, ": job file is ", text.size(),
                                                   " bytes, over the limit of ", kMaxJobFileBytes,
                                                   " bytes (1 MiB)"));
  }
  toml::table root;
  try {
    root = toml::parse(text, source_name_std);
  } catch (const toml::parse_error& e) {
    return absl::InvalidArgumentError(absl::StrCat(source_name, ":", e.source().begin.line, ":",
                                                   e.source().begin.column, ": ",
                                                   Sv(e.description())));
  }
  v1::JobSpec spec;
  std::vector<Problem> problems;
  CollectProblems(root, &spec, &problems);
  if (!problems.empty()) {
    std::stable_sort(problems.begin(), problems.end(), [](const Problem& a, const Problem& b) {
      return std::tie(a.line, a.column) < std::tie(b.line, b.column);
    });
    const Problem& first = problems.front();
    std::string message =
        absl::StrCat(source_name, ":", first.line, ":", first.column, ": ", first.message);
    if (problems.size() > 1) {
      absl::StrAppend(&message, " (and ", problems.size() - 1, " more problem",
                      problems.size() > 2 ? "s" : "", ")");
    }
    return absl::InvalidArgumentError(message);
  }
  for (const std::string& override_text : overrides) {
    TY_RETURN_IF_ERROR(ApplyOverride(override_text, &spec));
  }
  return spec;
}

absl::StatusOr<v1::JobSpec> LoadJobFile(const std::string& path,
                                        const std::vector<std::string>& overrides) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(absl::StrCat(path, ": cannot open job file"));
  }
  // Read at most one byte past the cap so an oversized (or endless) file is not slurped.
  std::string text(kMaxJobFileBytes + 1, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  if (in.bad()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": cannot read job file"));
  }
  text.resize(static_cast<size_t>(in.gcount()));
  if (text.size() > kMaxJobFileBytes) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": job file is larger than the limit of ",
                                                   kMaxJobFileBytes, " bytes (1 MiB)"));
  }
  return ParseJobToml(text, path, overrides);
}

}  // namespace trainyard
