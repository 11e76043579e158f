#include "client/cli/sweep_request.h"

#include <cstdio>
#include <string_view>
#include <variant>

#include "common/spec_proto.h"

namespace trainyard::cli {
namespace {

// A TOML basic string: quote and backslash escaped, control characters as TOML's
// escapes; every other byte kept (the spec core has checked the value is UTF-8).
std::string TomlString(std::string_view s) {
  std::string out = "\"";
  for (const char ch : s) {
    const unsigned char c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\f':
        out += "\\f";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (c < 0x20 || c == 0x7f) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04X", c);
          out += buf;
        } else {
          out.push_back(ch);
        }
    }
  }
  out += '"';
  return out;
}

}  // namespace

absl::StatusOr<SweepSubmission> LoadSweepSubmission(const std::string& file, const std::vector<std::string>& sets,
                                                    const spec::SweepFlags& flags, std::size_t max_points) {
  spec::Result<spec::SweepJob> job = spec::LoadSweepJobFile(file, sets, flags, max_points);
  if (!job.ok()) return SpecErrorToStatus(job.error());
  SweepSubmission out;
  out.job = std::move(job).value();
  if (out.job.sweep.axes.empty()) return out;
  spec::Result<std::vector<spec::SweepPoint>> points = spec::ExpandSweep(out.job.base, out.job.sweep, max_points);
  if (!points.ok()) return SpecErrorToStatus(points.error());
  out.points = points.value().size();
  return out;
}

std::string AxisValueText(const spec::FieldValue& value) {
  if (const std::string* s = std::get_if<std::string>(&value)) return TomlString(*s);
  return spec::ToText(value);
}

std::vector<v1::SweepAxis> WireAxes(const spec::Sweep& sweep) {
  std::vector<v1::SweepAxis> axes;
  for (const spec::SweepAxis& a : sweep.axes) {
    v1::SweepAxis& axis = axes.emplace_back();
    axis.set_key(a.field->path());
    for (const spec::FieldValue& v : a.values) axis.add_values(AxisValueText(v));
  }
  return axes;
}

v1::SubmitSweepRequest BuildSubmitSweepRequest(const spec::SweepJob& job) {
  v1::SubmitSweepRequest request;
  *request.mutable_spec() = ProtoFromInput(job.base);
  for (v1::SweepAxis& axis : WireAxes(job.sweep)) *request.add_axes() = std::move(axis);
  request.set_max_concurrent(job.sweep.max_concurrent);
  return request;
}

}  // namespace trainyard::cli
