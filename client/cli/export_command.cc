#include "client/cli/export_command.h"

#include <map>
#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/cli/cli_format.h"
#include "common/base/text.h"
#include "common/events/proto_json.h"
#include "common/spec/checkpoint_path.h"
#include "common/spec/hf_config.h"
#include "common/spec/job_file_reader.h"
#include "common/spec/presets.h"
#include "common/spec_proto.h"
#include "worker/engine/checkpoint/checkpoint_export.h"

namespace trainyard::cli {

int RunExportCommand(const ExportCommandOptions& options, JobClient* client, std::ostream& out, std::ostream& err) {
  auto fail = [&](const absl::Status& status) {
    err << FormatError(status) << std::endl;
    return ExitCodeForStatus(status);
  };
  engine::ExportOptions o;
  if (!engine::ParseExportNames(options.names, &o.names)) {
    return fail(absl::InvalidArgumentError("--names must be torchtitan or hf, got " + Quoted(options.names)));
  }
  if (options.job_id.empty() && options.checkpoint.empty()) {
    return fail(absl::InvalidArgumentError("give a job id or --checkpoint DIR"));
  }
  o.checkpoint = options.checkpoint;
  // A folder's config.json states the model: the job's keys.
  std::optional<spec::JobSpec> model_spec;
  if (!options.job_file.empty()) {
    if (!options.job_id.empty()) {
      return fail(
          absl::InvalidArgumentError("--job-file is for --checkpoint without a job id (a job id gives its spec)"));
    }
    spec::Result<spec::SpecInput> input = spec::LoadJobFile(options.job_file);
    if (!input.ok()) return fail(SpecErrorToStatus(input.error()));
    spec::Result<spec::JobSpec> resolved = spec::ResolveAndValidate(input.value());
    if (!resolved.ok()) return fail(SpecErrorToStatus(resolved.error()));
    model_spec = resolved.value();
  }
  if (!options.job_id.empty()) {
    if (client == nullptr) return fail(absl::InternalError("export: no controller client was made"));
    absl::StatusOr<v1::Job> job = client->GetJob(options.job_id);
    if (!job.ok()) return fail(job.status());
    if (o.checkpoint.empty()) {
      o.checkpoint = spec::JobCheckpointRoot(job->spec().checkpoint().dir(), job->id());
      if (job->spec().checkpoint().dir().empty()) {
        return fail(absl::FailedPreconditionError("job " + Quoted(job->id()) +
                                                  " has no checkpoint.dir, so it wrote no checkpoints to export"));
      }
    }
    o.metadata["trainyard.job_id"] = job->id();
    o.metadata["trainyard.spec"] = ToJsonLine(job->spec());
    absl::StatusOr<spec::JobSpec> core = ResolveAndValidateCore(job->spec());
    if (!core.ok()) return fail(core.status());
    model_spec = *core;
  }
  if (model_spec && o.names == engine::ExportNames::kHuggingFace) {
    spec::Result<std::string> config = spec::HuggingFaceConfigJson(*model_spec);
    // Only a folder needs it; a one-file export of the engine's own architecture has none.
    if (config.ok()) {
      o.hf_config_json = config.value();
    } else if (!absl::EndsWith(options.output, ".safetensors")) {
      return fail(SpecErrorToStatus(config.error()));
    }
  }
  o.step = options.step;
  o.best = options.best;
  o.output = options.output;
  o.force = options.force;
  absl::StatusOr<engine::ExportResult> r = engine::ExportCheckpoint(o);
  if (!r.ok()) return fail(r.status());
  if (options.json) {
    nlohmann::ordered_json j = {{"output", o.output},
                                {"checkpoint", r->checkpoint_dir},
                                {"step", r->step},
                                {"dp", r->dp},
                                {"tp", r->tp},
                                {"ep", r->ep},
                                {"names", options.names},
                                {"tensors", r->tensors},
                                {"bytes", r->bytes}};
    if (r->metric) j["metric"] = {{"name", r->metric->name}, {"value", r->metric->value}};
    if (!options.job_id.empty()) j["job_id"] = options.job_id;
    out << j.dump() << std::endl;
  } else {
    const std::string metric =
        r->metric ? absl::StrCat(", ", r->metric->name, " ", absl::StrFormat("%.6g", r->metric->value)) : "";
    out << TerminalSafe(
               absl::StrCat("exported step ", r->step, " (dp=", r->dp, " tp=", r->tp, " ep=", r->ep, metric, ") from ",
                            r->checkpoint_dir, ": ", r->tensors, " tensors, ",
                            FormatBytes(static_cast<int64_t>(r->bytes)), ", ", options.names, " names -> ", o.output),
               /*keep_newlines=*/false)
        << std::endl;
  }
  return kExitOk;
}

}  // namespace trainyard::cli
