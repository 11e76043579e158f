#include <string>

#include "absl/strings/str_cat.h"
#include "client/cli/cli_format.h"
#include "client/cli/command_runner.h"
#include "client/cli/fleet_format.h"
#include "common/events/proto_json.h"

namespace trainyard::cli {

int Runner::Checkpoint(const std::string& id) {
  // --timeout (the global flag, already a positive finite number) is how long the
  // controller waits for the checkpoint; without it the controller's default.
  const double timeout_s = options_.timeout_given ? options_.timeout_s : 0;
  if (timeout_s > JobClient::kCheckpointMaxTimeoutS) {
    return Fail(absl::InvalidArgumentError(absl::StrCat(
        "checkpoint: --timeout must be at most ", JobClient::kCheckpointMaxTimeoutS,
        " seconds (the controller waits no longer for a checkpoint), got ", timeout_s)));
  }
  absl::StatusOr<v1::CheckpointRef> checkpoint = client_->CheckpointJob(id, timeout_s);
  if (absl::IsDeadlineExceeded(checkpoint.status())) {
    // The controller's own answer (the call's deadline is 30 s past its): the ranks did
    // not save in time. Fail's hint about reaching the controller would mislead.
    err_ << FormatError(checkpoint.status()) << std::endl;
    return ExitCodeForStatus(checkpoint.status());
  }
  if (!checkpoint.ok()) return Fail(checkpoint.status());
  if (options_.Json()) {
    v1::CheckpointJobResponse response;
    *response.mutable_checkpoint() = *checkpoint;
    out_ << ToJsonLine(response) << '\n';
  } else {
    // The path comes from a rank.
    out_ << TerminalSafe(FormatCheckpointDone(id, *checkpoint), /*keep_newlines=*/true);
  }
  out_.flush();
  return kExitOk;
}

int Runner::Cordon(const std::string& name, bool cordon, const std::string& reason) {
  absl::StatusOr<v1::WorkerInfo> worker = client_->CordonWorker(name, cordon, reason);
  if (!worker.ok()) return Fail(worker.status());
  if (options_.Json()) {
    out_ << ToJsonLine(*worker) << '\n';
  } else {
    out_ << TerminalSafe(FormatCordonResult(*worker), /*keep_newlines=*/true);
  }
  out_.flush();
  return kExitOk;
}

int Runner::Drain(const std::string& name, const std::string& reason) {
  absl::StatusOr<v1::DrainWorkerResponse> drained = client_->DrainWorker(name, reason);
  if (!drained.ok()) return Fail(drained.status());
  if (options_.Json()) {
    out_ << ToJsonLine(*drained) << '\n';
  } else {
    out_ << TerminalSafe(FormatDrainResult(*drained), /*keep_newlines=*/true);
  }
  out_.flush();
  return kExitOk;
}

}  // namespace trainyard::cli
