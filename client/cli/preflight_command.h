#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "common/base/clock.h"
#include "common/base/process_launcher.h"

namespace trainyard::cli {

// Exit codes of `trainyard preflight`, from the CLI's one table (cli_format.h): the
// runner's own verdicts (its exit 0 clean, 3 findings, 2 bad config, 1 failure) mapped
// onto it.
inline constexpr int kPreflightClean = 0;          // kExitOk
inline constexpr int kPreflightFindings = 1;       // kExitJobFailed: UNSAFE_SIDE_EFFECT or RECOMPILE_LIMIT seen
inline constexpr int kPreflightBadInput = 2;       // kExitUsage: job file, validation or usage error
inline constexpr int kPreflightRunnerFailed = 6;   // kExitError: a rank failed, timeout, cannot start

struct PreflightCommandOptions {
  std::string job_file;
  std::vector<std::string> sets;  // --set section.key=value
  bool shrink = false;
  bool json = false;  // stdout: the runner's raw Event JSON lines
  std::string train_binary;  // trainyard-train
  double timeout_s = 300;  // the runner's process group is killed after this
  std::string spec_dir;  // where the resolved JobSpec JSON is written for the runner
};

// `trainyard preflight`: loads and validates the job file with the spec core's rules, as
// `submit` and the controller do (the controller's fleet checks aside), prints the
// memory one rank needs (FormatMemoryEstimate on `out`; with `json` one
// MemoryEstimateJsonLine on `err`), runs `trainyard-train SPEC.json --preflight
// [--shrink] --json` locally, prints each COMPILE, RECOMPILE, RECOMPILE_LIMIT,
// GRAPH_BREAK, UNSAFE_SIDE_EFFECT and FALLBACK event as it arrives (one human line, or
// the raw JSON line with `json`), then a verdict line: on `out` in text mode, on `err`
// with `json` so that stdout stays JSON Lines of Events. Returns the exit code above.
// The runner is started through `launcher` and timed on `clock`.
int RunPreflightCommand(const PreflightCommandOptions& options, ProcessLauncher* launcher,
                        Clock* clock, std::ostream& out, std::ostream& err);

}  // namespace trainyard::cli
