#pragma once

#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/base/clock.h"
#include "common/base/process_launcher.h"
#include "common/preflight_memory.h"
#include "trainyard/v1/job_service.pb.h"

namespace trainyard::cli {

// Exit codes of `trainyard preflight`, from the CLI's one table (cli_format.h): the
// runner's own verdicts (its exit 0 clean, 3 findings, 2 bad config, 1 failure) mapped
// onto it.
inline constexpr int kPreflightClean = 0;          // kExitOk
inline constexpr int kPreflightFindings = 1;       // kExitJobFailed: UNSAFE_SIDE_EFFECT or RECOMPILE_LIMIT
                                                   // seen; --shrink: the full model fits no worker
inline constexpr int kPreflightBadInput = 2;       // kExitUsage: job file, validation or usage error;
                                                   // a runner too big for this machine
inline constexpr int kPreflightRunnerFailed = 6;   // kExitError: a rank failed, timeout, cannot start

struct PreflightCommandOptions {
  std::string job_file;
  std::vector<std::string> sets;  // --set section.key=value
  bool shrink = false;
  bool json = false;  // stdout: the runner's raw Event JSON lines
  std::string train_binary;  // trainyard-train
  double timeout_s = 300;  // the runner's process group is killed after this
  std::string spec_dir;  // where the resolved JobSpec JSON is written for the runner
  // With --shrink: the fleet's workers (ListWorkers of --controller), to hold the full
  // model against; unset or failing: "not checked" and why.
  std::function<absl::StatusOr<std::vector<v1::WorkerInfo>>()> list_workers;
  // What this machine can give the runner; unset: ReadHostMemory().
  std::function<absl::StatusOr<HostMemory>()> host_memory;
};

// `trainyard preflight`: loads and validates the job file with the spec core's rules, as
// `submit` and the controller do (the controller's fleet checks aside), prints the
// memory one rank needs (FormatMemoryEstimate on `out`; with `json` one
// MemoryEstimateJsonLine on `err`); with `shrink`, whether the full model fits the
// fleet's largest worker (FitFleet; a "fleet:" line); then runs the PreflightRunner:
// a runner whose ranks would need more memory than this machine can give is refused
// (exit 2, with the figures, --shrink and a layout that fits), any other runs under the
// memory cap the runner sets (a "runner:" line says it). It prints each COMPILE,
// RECOMPILE, RECOMPILE_LIMIT, GRAPH_BREAK, UNSAFE_SIDE_EFFECT and FALLBACK event as it
// arrives (one human line, or the raw JSON line with `json`), then a verdict line: on
// `out` in text mode, on `err` with `json` so that stdout stays JSON Lines of Events.
// A clean shrunk run whose full model fits no worker is a finding (exit 1): submitting
// it as it is would be refused. Returns the exit code above. The runner is started
// through `launcher` and timed on `clock`.
int RunPreflightCommand(const PreflightCommandOptions& options, ProcessLauncher* launcher,
                        Clock* clock, std::ostream& out, std::ostream& err);

}  // namespace trainyard::cli
