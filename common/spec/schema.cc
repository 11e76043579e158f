#include "common/spec/schema.h"

#include <algorithm>
#include <cstdio>
#include <cmath>
#include <cstdlib>
#include <type_traits>

#include "common/spec/spec_error.h"

namespace trainyard::spec {
namespace {

template <class T>
constexpr FieldKind KindOf() {
  if constexpr (std::is_same_v<T, int>) return FieldKind::kInt32;
  if constexpr (std::is_same_v<T, std::uint64_t>) return FieldKind::kUint64;
  if constexpr (std::is_same_v<T, double>) return FieldKind::kDouble;
  if constexpr (std::is_same_v<T, bool>) return FieldKind::kBool;
  if constexpr (std::is_same_v<T, std::string>) return FieldKind::kString;
}

std::size_t EditDistance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diag = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

}  // namespace

const char* KindName(FieldKind kind) {
  switch (kind) {
    case FieldKind::kInt32:
    case FieldKind::kUint64:
      return "integer";
    case FieldKind::kDouble:
      return "float";
    case FieldKind::kBool:
      return "boolean";
    case FieldKind::kString:
      return "string";
  }
  return "value";
}

const std::vector<FieldInfo>& Fields() {
  static const std::vector<FieldInfo>* fields = [] {
    auto* out = new std::vector<FieldInfo>();
    JobSpec spec;
    ForEachField(spec, [&](const char* section, const char* key, auto& member) {
      out->push_back({section, key, KindOf<std::decay_t<decltype(member)>>()});
    });
    return out;
  }();
  return *fields;
}

const std::vector<std::string>& Sections() {
  static const std::vector<std::string>* sections = [] {
    auto* out = new std::vector<std::string>();
    for (const FieldInfo& f : Fields()) {
      if (out->empty() || out->back() != f.section) out->push_back(f.section);
    }
    return out;
  }();
  return *sections;
}

bool IsSection(std::string_view name) {
  const auto& s = Sections();
  return std::find(s.begin(), s.end(), name) != s.end();
}

const FieldInfo* FindField(std::string_view section, std::string_view key) {
  for (const FieldInfo& f : Fields()) {
    if (f.section == section && f.key == key) return &f;
  }
  return nullptr;
}

FieldValue GetField(const JobSpec& spec, std::string_view section, std::string_view key) {
  FieldValue out;
  bool found = false;
  ForEachField(spec, [&](const char* s, const char* k, const auto& member) {
    if (!found && section == s && key == k) {
      out = member;
      found = true;
    }
  });
  if (!found) std::abort();  // callers look keys up with FindField first
  return out;
}

void SetField(JobSpec& spec, std::string_view section, std::string_view key, const FieldValue& value) {
  bool found = false;
  ForEachField(spec, [&](const char* s, const char* k, auto& member) {
    if (found || section != s || key != k) return;
    using T = std::decay_t<decltype(member)>;
    const T* v = std::get_if<T>(&value);
    if (v == nullptr) std::abort();  // SpecInput::Set converts values to the field's kind
    member = *v;
    found = true;
  });
  if (!found) std::abort();
}

std::string Suggestion(std::string_view section, std::string_view name) {
  std::string best;
  std::size_t best_distance = 3;  // only close misses (typos)
  auto consider = [&](const std::string& candidate, const std::string& shown) {
    const std::size_t longer = std::max(name.size(), candidate.size());
    if (longer - std::min(name.size(), candidate.size()) >= best_distance) return;  // too far apart
    const std::size_t d = EditDistance(name, candidate);
    if (d < best_distance) {
      best_distance = d;
      best = shown;
    }
  };
  if (section.empty()) {
    for (const std::string& s : Sections()) consider(s, s);
  } else {
    for (const FieldInfo& f : Fields()) {
      if (f.section == section) consider(f.key, f.path());
    }
  }
  return best.empty() ? "" : " (did you mean " + best + "?)";
}

std::string KnownSections() {
  std::string out;
  for (const std::string& s : Sections()) out += (out.empty() ? "" : ", ") + s;
  return out;
}

std::string ToText(const FieldValue& value) {
  if (const int* i = std::get_if<int>(&value)) return std::to_string(*i);
  if (const auto* u = std::get_if<std::uint64_t>(&value)) return std::to_string(*u);
  if (const bool* b = std::get_if<bool>(&value)) return *b ? "true" : "false";
  if (const double* d = std::get_if<double>(&value)) {
    char buf[32];
    if (*d == 0) return "0";  // -0 too: JSON readers drop the sign of zero
    if (std::isfinite(*d) && std::abs(*d) < 1e15 && *d == std::trunc(*d)) {
      std::snprintf(buf, sizeof(buf), "%.0f", *d);  // 20, not 2e+01
      return buf;
    }
    std::snprintf(buf, sizeof(buf), "%.17g", *d);
    // Shortest form that reads back the same, so 0.1 prints as 0.1.
    for (int precision = 1; precision <= 17; ++precision) {
      char shorter[32];
      std::snprintf(shorter, sizeof(shorter), "%.*g", precision, *d);
      if (std::strtod(shorter, nullptr) == *d) return shorter;
    }
    return buf;
  }
  return "\"" + Quote(std::get<std::string>(value)) + "\"";
}

}  // namespace trainyard::spec
