#include "client/cli/sweep_request.h"

#include <utility>

#include "common/spec_proto.h"

namespace trainyard::cli {

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

std::vector<v1::SweepAxis> WireAxes(const spec::Sweep& sweep) {
  std::vector<v1::SweepAxis> axes;
  for (const spec::SweepAxis& a : sweep.axes) {
    v1::SweepAxis& axis = axes.emplace_back();
    axis.set_key(a.field->path());
    for (const spec::FieldValue& v : a.values) axis.add_values(spec::SweepValueText(v));
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
