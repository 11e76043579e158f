#include "server/policy/policy_file.h"

#include <sys/stat.h>
#include <toml++/toml.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <optional>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/base/file_io.h"
#include "common/base/file_problems.h"
#include "server/policy/toml_text.h"
#include "common/base/text.h"
#include "common/spec/toml_type_name.h"

namespace trainyard {
namespace {


// `x` as an operator wrote it: integral values without an exponent (1000000, not 1e+06).
std::string Number(double x) {
  if (std::isfinite(x) && x == std::floor(x) && std::fabs(x) < 1e15) return absl::StrCat(static_cast<int64_t>(x));
  return absl::StrCat(x);
}

// Collects every problem with its position, so the earliest in the file is reported
// (toml++ tables iterate in key order, not file order).
class Reader {
 public:
  explicit Reader(std::string file_name) : problems_(std::move(file_name)) {}

  void Add(const toml::source_region& where, std::string message) {
    problems_.Add(where.begin.line, where.begin.column, std::move(message));
  }

  absl::Status Result() { return problems_.Result(); }

  // A slot or GPU limit: an integer in [0, kMaxPolicyLimit].
  std::optional<int> Limit(const toml::node& node, const std::string& what) {
    const auto* v = node.as_integer();
    if (v == nullptr) {
      Add(node.source(), absl::StrCat(what, ": expected an integer, got ", spec::TomlTypeName(node.type())));
      return std::nullopt;
    }
    const int64_t n = v->get();
    if (n < 0 || n > kMaxPolicyLimit) {
      Add(node.source(), absl::StrCat(what, ": ", n, " is out of range (0 to ", kMaxPolicyLimit, "; 0: no limit)"));
      return std::nullopt;
    }
    return static_cast<int>(n);
  }

  // A number (integer or float) that is finite, > 0 and at most `max`.
  std::optional<double> Positive(const toml::node& node, const std::string& what, double max) {
    double x = 0;
    if (const auto* i = node.as_integer()) {
      x = static_cast<double>(i->get());
    } else if (const auto* f = node.as_floating_point()) {
      x = f->get();
    } else {
      Add(node.source(), absl::StrCat(what, ": expected a number, got ", spec::TomlTypeName(node.type())));
      return std::nullopt;
    }
    if (!std::isfinite(x) || x <= 0 || x > max) {
      Add(node.source(),
          absl::StrCat(what, ": ", Number(x), " is out of range (finite, more than 0, at most ", Number(max), ")"));
      return std::nullopt;
    }
    return x;
  }

  // An owner or group name: 1..kMaxPolicyNameBytes of printable ASCII, no spaces.
  std::optional<std::string> Name(const toml::node& node, const std::string& what) {
    const auto* s = node.as_string();
    if (s == nullptr) {
      Add(node.source(), absl::StrCat(what, ": expected a string, got ", spec::TomlTypeName(node.type())));
      return std::nullopt;
    }
    const std::string& name = s->get();
    if (name.empty()) {
      Add(node.source(), absl::StrCat(what, ": must not be empty"));
      return std::nullopt;
    }
    if (name.size() > kMaxPolicyNameBytes) {
      Add(node.source(),
          absl::StrCat(what, ": ", Quoted(name), " is ", name.size(), " bytes, more than ", kMaxPolicyNameBytes));
      return std::nullopt;
    }
    for (unsigned char c : name) {
      if (c <= 0x20 || c >= 0x7f) {
        Add(node.source(), absl::StrCat(what, ": ", Quoted(name), " must be printable ASCII without spaces"));
        return std::nullopt;
      }
    }
    return name;
  }

  // The entries of `[[kind]]`: each a table, else a problem.
  std::vector<const toml::table*> Entries(const toml::key& key, const toml::node& node, const std::string& kind) {
    std::vector<const toml::table*> out;
    const auto* array = node.as_array();
    if (array != nullptr && array->empty()) return out;  // `group = []`: none
    if (array == nullptr || !array->is_array_of_tables()) {
      Add(array == nullptr ? node.source() : key.source(),
          absl::StrCat(kind, ": expected an array of tables ([[", kind, "]]), got ",
                       array == nullptr ? spec::TomlTypeName(node.type()) : "an array of values"));
      return out;
    }
    for (const auto& element : *array) out.push_back(element.as_table());
    return out;
  }

  void UnknownKey(const toml::key& key, const std::string& where, const std::string& allowed) {
    Add(key.source(), absl::StrCat("unknown key ", Quoted(key.str()), where, " (allowed: ", allowed, ")"));
  }

 private:
  FileProblems problems_;
};

// A name as read, with where it was.
struct NameAt {
  std::string name;
  toml::source_region where;
};

// A limits key of [defaults], [[group]] or [[owner]]; false when `key` is not one.
bool ReadLimitKey(Reader* r, std::string_view key, const toml::node& node, const std::string& section,
                  OwnerLimits* limits) {
  if (key == "slots") {
    if (auto n = r->Limit(node, section + ".slots")) limits->slots = *n;
    return true;
  }
  if (key == "gpus") {
    if (auto n = r->Limit(node, section + ".gpus")) limits->gpus = *n;
    return true;
  }
  return false;
}

}  // namespace

absl::StatusOr<SharingPolicy> ParsePolicyFile(std::string_view text, const std::string& file_name) {
  absl::StatusOr<toml::table> parsed = ParseTomlText(text, file_name, kMaxPolicyFileBytes, "policy file");
  if (!parsed.ok()) return parsed.status();
  toml::table root = *std::move(parsed);

  Reader r(file_name);
  SharingPolicy policy;
  std::vector<NameAt> group_names, owner_names;  // parallel to policy.groups / owners
  std::vector<std::optional<NameAt>> owner_groups;
  for (auto&& [key, node] : root) {
    const std::string_view k = key.str();
    if (k == "half_life_hours") {
      if (auto h = r.Positive(node, "half_life_hours", kMaxPolicyHalfLifeHours)) policy.half_life_hours = *h;
    } else if (k == "defaults") {
      const auto* table = node.as_table();
      if (table == nullptr) {
        r.Add(node.source(), absl::StrCat("defaults: expected a table ([defaults]), got ", spec::TomlTypeName(node.type())));
        continue;
      }
      for (auto&& [dk, dv] : *table) {
        if (!ReadLimitKey(&r, dk.str(), dv, "defaults", &policy.defaults)) {
          r.UnknownKey(dk, " in [defaults]", "slots, gpus");
        }
      }
    } else if (k == "group") {
      for (const toml::table* table : r.Entries(key, node, "group")) {
        GroupPolicy g;
        std::optional<NameAt> name;
        for (auto&& [gk, gv] : *table) {
          if (ReadLimitKey(&r, gk.str(), gv, "group", &g.limits)) continue;
          if (gk.str() == "name") {
            if (auto n = r.Name(gv, "group.name")) name = NameAt{*n, gv.source()};
          } else if (gk.str() == "weight") {
            if (auto w = r.Positive(gv, "group.weight", kMaxPolicyWeight)) g.weight = *w;
          } else {
            r.UnknownKey(gk, " in [[group]]", "name, slots, gpus, weight");
          }
        }
        if (!name) {
          if (table->find("name") == table->end()) r.Add(table->source(), "[[group]] has no name");
          continue;
        }
        g.name = name->name;
        policy.groups.push_back(std::move(g));
        group_names.push_back(*name);
      }
    } else if (k == "owner") {
      for (const toml::table* table : r.Entries(key, node, "owner")) {
        OwnerPolicy o;
        std::optional<NameAt> name, group;
        for (auto&& [ok, ov] : *table) {
          if (ReadLimitKey(&r, ok.str(), ov, "owner", &o.limits)) continue;
          if (ok.str() == "name") {
            if (auto n = r.Name(ov, "owner.name")) name = NameAt{*n, ov.source()};
          } else if (ok.str() == "group") {
            if (auto n = r.Name(ov, "owner.group")) group = NameAt{*n, ov.source()};
          } else {
            r.UnknownKey(ok, " in [[owner]]", "name, group, slots, gpus");
          }
        }
        if (!name) {
          if (table->find("name") == table->end()) r.Add(table->source(), "[[owner]] has no name");
          continue;
        }
        o.name = name->name;
        if (group) o.group = group->name;
        policy.owners.push_back(std::move(o));
        owner_names.push_back(*name);
        owner_groups.push_back(group);
      }
    } else {
      r.UnknownKey(key, "", "half_life_hours, [defaults], [[group]], [[owner]]");
    }
  }

  // Across entries: names once each, and every owner's group declared.
  auto duplicates = [&](const std::vector<NameAt>& names, const char* kind) {
    std::map<std::string, const NameAt*> first;
    for (const NameAt& n : names) {
      auto [it, fresh] = first.emplace(n.name, &n);
      if (!fresh) {
        r.Add(n.where, absl::StrCat("duplicate ", kind, " ", Quoted(n.name), " (first at line ",
                                    it->second->where.begin.line, ")"));
      }
    }
  };
  duplicates(group_names, "group");
  duplicates(owner_names, "owner");
  for (size_t i = 0; i < owner_groups.size(); ++i) {
    const auto& group = owner_groups[i];
    if (group && policy.FindGroup(group->name) == nullptr) {
      r.Add(group->where, absl::StrCat("owner ", Quoted(owner_names[i].name), ": group ", Quoted(group->name),
                                       " is not a [[group]] of this file"));
    }
  }
  if (absl::Status s = r.Result(); !s.ok()) return s;
  return policy;
}

absl::StatusOr<SharingPolicy> LoadPolicyFile(const std::string& path) {
  absl::StatusOr<std::string> text = ReadTomlFile(path, kMaxPolicyFileBytes, "policy file");
  if (!text.ok()) return text.status();
  return ParsePolicyFile(*text, path);
}

}  // namespace trainyard
