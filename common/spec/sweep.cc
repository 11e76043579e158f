#include "common/spec/sweep.h"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <unordered_map>
#include <utility>

#include "common/spec/overrides.h"
#include "common/spec/presets.h"
#include "common/spec/rules.h"

namespace trainyard::spec {
namespace {

SpecError Fail(std::string field, std::string rule, const std::string& label, const std::string& origin,
               const std::string& message) {
  SpecError e = Invalid(std::move(field), std::move(rule), label + ": " + message);
  e.origin = origin;
  return e;
}

// A value as the user spelled it, for messages: the --sweep text, else the TOML value.
std::string RawText(const RawValue& raw) {
  if (raw.literal.has_value()) return "\"" + Quote(*raw.literal) + "\"";
  if (const auto* i = std::get_if<std::int64_t>(&raw.value)) return std::to_string(*i);
  if (const auto* d = std::get_if<double>(&raw.value)) return ToText(FieldValue{*d});
  if (const auto* b = std::get_if<bool>(&raw.value)) return *b ? "true" : "false";
  return ToText(FieldValue{std::get<std::string>(raw.value)});
}

// "value 2 of 3": positions count from 1, as people do.
std::string Position(std::size_t i, std::size_t n) {
  return "value " + std::to_string(i + 1) + " of " + std::to_string(n);
}

// The name each axis has in point labels: the key alone unless another axis has a key
// of that name (training.steps and validation.steps), then section.key.
std::vector<std::string> LabelNames(const Sweep& sweep) {
  std::vector<std::string> out;
  for (const SweepAxis& a : sweep.axes) {
    const bool shared = std::count_if(sweep.axes.begin(), sweep.axes.end(),
                                      [&](const SweepAxis& b) { return b.field->key == a.field->key; }) > 1;
    out.push_back(shared ? a.field->path() : a.field->key);
  }
  return out;
}

std::string PointLabel(const std::vector<std::string>& names, const std::vector<FieldValue>& values) {
  std::string out;
  for (std::size_t a = 0; a < values.size(); ++a) {
    out += (a == 0 ? "" : ",") + names[a] + "=" + ToText(values[a]);
  }
  return out;
}

std::size_t Digits(std::size_t n) {
  std::size_t d = 1;
  while (n >= 10) {
    n /= 10;
    ++d;
  }
  return d;
}

}  // namespace

Result<const FieldInfo*> SweepableField(std::string_view section, std::string_view key, const std::string& label,
                                        const std::string& origin) {
  const std::string path = std::string(section) + "." + std::string(key);
  if (!IsUtf8(section) || !IsUtf8(key)) {
    return Fail(path, "utf8", label, origin, "key \"" + Quote(path) + "\" is not valid UTF-8");
  }
  if (section == "sweep") {
    return Fail(path, "not_sweepable", label, origin,
                "the sweep's own settings cannot be swept (sweep.max_concurrent is one number)");
  }
  if (!IsSection(section)) {
    SpecError e = UnknownSection(section);
    return Fail(e.field, e.rule, label, origin, e.message);
  }
  const FieldInfo* field = FindField(section, key);
  if (field == nullptr) {
    SpecError e = UnknownKey(section, key);
    return Fail(e.field, e.rule, label, origin, e.message);
  }
  if (field->section == "job" && field->key == "name") {
    return Fail(path, "not_sweepable", label, origin,
                "job.name cannot be swept: it names the sweep, and child i is named <job.name>-i");
  }
  return field;
}

std::optional<SpecError> AddSweepAxis(Sweep& sweep, const FieldInfo& field, const std::vector<RawValue>& values,
                                      const std::string& label, const std::string& origin) {
  const std::string path = field.path();
  // Again here, for callers that build axes from a FieldInfo of their own.
  Result<const FieldInfo*> sweepable = SweepableField(field.section, field.key, label, origin);
  if (!sweepable.ok()) return sweepable.error();
  // The schema's own entry, so a caller's copy of a FieldInfo is still seen as a
  // duplicate and the axis never points at the caller's storage.
  const FieldInfo* canonical = sweepable.value();
  for (const SweepAxis& a : sweep.axes) {
    if (a.field == canonical) {
      const std::string first = a.origin.empty() ? a.label : a.origin + " (" + a.label + ")";
      return Fail(path, "duplicate", label, origin, path + " is swept twice; first by " + first);
    }
  }
  if (values.empty()) return Fail(path, "length", label, origin, "no values (a swept key needs at least one)");
  SweepAxis axis{canonical, {}, label, origin};
  axis.values.reserve(values.size());
  // Typed through SpecInput::Set, so a swept value meets exactly the checks the same
  // value meets in a job file or a --set flag.
  SpecInput scratch;
  std::unordered_map<FieldValue, std::size_t> first_seen;  // -0 is stored as 0, NaN never
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (auto e = scratch.Set(field.section, field.key, values[i], origin)) {
      std::string why = e->message;
      if (why.rfind(path + ": ", 0) == 0) why = why.substr(path.size() + 2);
      return Fail(path, e->rule, label, origin, Position(i, values.size()) + " (" + RawText(values[i]) + "): " + why);
    }
    FieldValue typed = scratch.Find(field.section, field.key)->value;
    // A repeated value would make two children with the same spec: a typo, not a plan.
    // Hashed, so an axis as long as a raised limit is still checked in linear time.
    const auto [same, fresh] = first_seen.emplace(typed, i);
    if (!fresh) {
      return Fail(
          path, "duplicate", label, origin,
          Position(i, values.size()) + " (" + ToText(typed) + ") repeats value " + std::to_string(same->second + 1));
    }
    axis.values.push_back(std::move(typed));
  }
  sweep.axes.push_back(std::move(axis));
  return std::nullopt;
}

std::optional<SpecError> SetSweepMaxConcurrent(Sweep& sweep, std::int64_t value, const std::string& label,
                                               const std::string& origin) {
  if (value < 1 || value > std::numeric_limits<std::int32_t>::max()) {
    return Fail("sweep.max_concurrent", "range", label, origin,
                "must be 1 to " + std::to_string(std::numeric_limits<std::int32_t>::max()) +
                    " (leave it out for no limit), got " + std::to_string(value));
  }
  sweep.max_concurrent = static_cast<int>(value);
  return std::nullopt;
}

Result<std::size_t> CountSweepPoints(const std::vector<SweepAxisSize>& axes, std::size_t max_points) {
  if (axes.empty()) return Invalid("", "length", "a sweep needs at least one swept key");
  std::uint64_t total = 1;
  bool overflow = false;
  std::string sizes;
  for (const SweepAxisSize& a : axes) {
    sizes += (sizes.empty() ? "" : " x ") + a.path + ": " + std::to_string(a.values);
    if (a.values == 0) {
      return Invalid(a.path, "length", a.path + ": no values (a swept key needs at least one)");
    }
    if (!overflow && total > std::numeric_limits<std::uint64_t>::max() / a.values) overflow = true;
    if (!overflow) total *= a.values;
  }
  if (overflow || total > max_points) {
    const std::string count =
        overflow ? "more than " + std::to_string(std::numeric_limits<std::uint64_t>::max()) : std::to_string(total);
    return Invalid("", "limit",
                   "sweep of " + count + " points (" + sizes + " values) is over the limit of " +
                       std::to_string(max_points) + " points");
  }
  return static_cast<std::size_t>(total);
}

Result<std::size_t> CountSweepPoints(const Sweep& sweep, std::size_t max_points) {
  std::vector<SweepAxisSize> sizes;
  for (const SweepAxis& a : sweep.axes) sizes.push_back({a.field->path(), a.values.size()});
  return CountSweepPoints(sizes, max_points);
}

std::string SweepValueText(const FieldValue& value) {
  const std::string* text = std::get_if<std::string>(&value);
  if (text == nullptr) return ToText(value);
  std::string out = "\"";
  for (unsigned char c : *text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04X", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

Result<Sweep> SweepFromText(const std::vector<SweepAxisText>& axes, std::int64_t max_concurrent,
                            std::size_t max_points) {
  if (axes.empty()) return Invalid("sweep", "length", "a sweep needs at least one swept key");
  std::vector<const FieldInfo*> fields;
  std::vector<SweepAxisSize> sizes;
  for (std::size_t a = 0; a < axes.size(); ++a) {
    const std::string& key = axes[a].key;
    const std::size_t dot = key.find('.');
    const std::string label = IsUtf8(key) && key.size() <= 128 ? "axis " + key : "axis " + std::to_string(a + 1);
    if (dot == std::string::npos || dot == 0 || dot + 1 == key.size()) {
      return Invalid(key, "format", label + ": the key must be section.key, got \"" + Quote(key) + "\"");
    }
    Result<const FieldInfo*> field =
        SweepableField(std::string_view(key).substr(0, dot), std::string_view(key).substr(dot + 1), label, "");
    if (!field.ok()) return field.error();
    fields.push_back(field.value());
    sizes.push_back({key, axes[a].values.size()});
  }
  // Counted before a value is read: a request of 10^6 points costs no parsing.
  Result<std::size_t> count = CountSweepPoints(sizes, max_points);
  if (!count.ok()) return count.error();
  Sweep sweep;
  for (std::size_t a = 0; a < axes.size(); ++a) {
    const std::string label = "axis " + axes[a].key;
    std::vector<RawValue> raw;
    raw.reserve(axes[a].values.size());
    for (std::size_t i = 0; i < axes[a].values.size(); ++i) {
      const std::string& text = axes[a].values[i];
      if (text.empty()) {
        return Invalid(
            axes[a].key, "length",
            label + ": " + Position(i, axes[a].values.size()) + " is empty (write \"\" for an empty string)");
      }
      raw.push_back(ParseOverrideValue(text));
    }
    if (auto e = AddSweepAxis(sweep, *fields[a], raw, label, "")) return *e;
  }
  if (max_concurrent != 0) {
    if (auto e = SetSweepMaxConcurrent(sweep, max_concurrent, "max_concurrent", "")) return *e;
  }
  return sweep;
}

Result<std::vector<SweepPoint>> ExpandSweep(const SpecInput& base, const Sweep& sweep, std::size_t max_points) {
  Result<std::size_t> count = CountSweepPoints(sweep, max_points);
  if (!count.ok()) return count.error();
  const std::size_t n = count.value();

  // Child names are checked here, once, rather than as the same job.name error on
  // every point: the base name is the user's, the suffix is ours.
  const Assignment* given_name = base.Find("job", "name");
  const std::string base_name = given_name != nullptr ? std::get<std::string>(given_name->value) : JobMeta{}.name;
  const std::string name_origin = given_name != nullptr ? given_name->origin : "";
  const std::size_t longest = base_name.size() + 1 + Digits(n - 1);
  if (longest > kMaxNameLength) {
    SpecError e = Invalid("job.name", "length",
                          "job.name \"" + Quote(base_name) + "\" is too long for a sweep of " + std::to_string(n) +
                              " points: its children are named <job.name>-<index>, up to " + std::to_string(longest) +
                              " characters, over the limit of " + std::to_string(kMaxNameLength));
    e.origin = name_origin;
    return e;
  }

  const std::vector<std::string> names = LabelNames(sweep);
  std::vector<SweepPoint> points;
  points.reserve(n);
  std::optional<SpecError> first_error;
  std::size_t failed = 0;
  for (std::size_t i = 0; i < n; ++i) {
    SweepPoint point;
    point.index = i;
    point.name = base_name + "-" + std::to_string(i);
    point.values.resize(sweep.axes.size());
    std::size_t rest = i;
    for (std::size_t a = sweep.axes.size(); a-- > 0;) {
      const std::vector<FieldValue>& values = sweep.axes[a].values;
      point.values[a] = values[rest % values.size()];
      rest /= values.size();
    }
    point.label = PointLabel(names, point.values);
    point.input = base;
    std::optional<SpecError> e = point.input.SetTyped("job", "name", point.name, name_origin);
    for (std::size_t a = 0; a < sweep.axes.size() && !e; ++a) {
      const SweepAxis& axis = sweep.axes[a];
      e = point.input.SetTyped(axis.field->section, axis.field->key, point.values[a], axis.AssignmentOrigin());
    }
    if (!e) {
      Result<JobSpec> spec = ResolveAndValidate(point.input);
      if (spec.ok()) {
        point.spec = std::move(spec).value();
      } else {
        e = spec.error();
      }
    }
    if (e) {
      // Keep going: the count of failing points tells a bad value on one axis (a third
      // of them) from a bad base (all of them). Bounded by max_points.
      if (!first_error) {
        first_error = std::move(e);
        first_error->message = "sweep point " + std::to_string(i) + " of " + std::to_string(n) + " (" + point.label +
                               "): " + first_error->message;
      }
      ++failed;
      points.clear();
      continue;
    }
    if (!first_error) points.push_back(std::move(point));
  }
  if (first_error) {
    if (failed > 1) {
      first_error->message += " (and " + std::to_string(failed - 1) + " more point" + (failed > 2 ? "s" : "") +
                              " fail" + (failed > 2 ? "" : "s") + ")";
    }
    return *first_error;
  }
  return points;
}

}  // namespace trainyard::spec
