#include "client/cli/preflight_command.h"

#include "absl/strings/str_cat.h"
#include "client/cli/cli_format.h"
#include "client/cli/memory_format.h"
#include "common/spec/job_file_reader.h"
#include "common/spec/presets.h"
#include "common/preflight_runner.h"
#include "common/spec_proto.h"

namespace trainyard::cli {
namespace {

// The job exactly as the controller would store it, or why every rank would refuse it:
// the spec core's rules, with the file:line or --set each value came from (the
// controller's fleet checks, slots and devices, are not known here).
absl::StatusOr<spec::JobSpec> ResolveJob(const PreflightCommandOptions& options) {
  spec::Result<spec::SpecInput> input = spec::LoadJobFile(options.job_file, options.sets);
  if (!input.ok()) return SpecErrorToStatus(input.error());
  spec::Result<spec::JobSpec> resolved = spec::ResolveAndValidate(input.value());
  if (!resolved.ok()) return SpecErrorToStatus(resolved.error());
  return resolved.value();
}

}  // namespace

int RunPreflightCommand(const PreflightCommandOptions& options, ProcessLauncher* launcher,
                        Clock* clock, std::ostream& out, std::ostream& err) {
  absl::StatusOr<spec::JobSpec> core = ResolveJob(options);
  if (!core.ok()) {
    err << FormatError(core.status()) << std::endl;
    return kPreflightBadInput;
  }
  // The memory one rank needs first (docs/memory.md): it needs no runner. With --json
  // stdout stays the runner's Event lines, so it goes to stderr as one JSON line.
  if (options.json) {
    err << MemoryEstimateJsonLine(*core) << std::endl;
  } else {
    out << FormatMemoryEstimate(*core) << std::flush;
  }
  const v1::JobSpec spec = ProtoFromSpec(*core);

  PreflightOptions runner_options;
  runner_options.binary = options.train_binary;
  runner_options.shrink = options.shrink;
  runner_options.timeout = absl::Seconds(options.timeout_s);
  runner_options.spec_dir = options.spec_dir;
  const PreflightRunner runner(launcher, runner_options, clock);
  // The callback runs on the runner's reader thread while this one waits in Run.
  absl::StatusOr<PreflightReport> report =
      runner.Run(spec, [&](const std::string& line, const v1::Event* event) {
        if (event == nullptr || !event->has_compile() ||
            !IsShownPreflightKind(event->compile().kind())) {
          return;
        }
        out << (options.json ? line : FormatPreflightEvent(*event)) << std::endl;
      });
  std::ostream& verdict = options.json ? err : out;
  if (!report.ok()) {
    verdict << "preflight: runner failure: " << report.status().message() << std::endl;
    return kPreflightRunnerFailed;
  }
  switch (report->verdict) {
    case PreflightVerdict::kClean:
      verdict << "preflight: clean (" << report->compile_events
              << " compile events, no UNSAFE_SIDE_EFFECT or RECOMPILE_LIMIT)" << std::endl;
      return kPreflightClean;
    case PreflightVerdict::kFindings: {
      std::string what = SummarizeFindings(report->findings);
      if (what.empty()) what = "the runner exited with status 3 but printed no finding event";
      verdict << "preflight: FINDINGS, fix them before submitting: " << what << std::endl;
      return kPreflightFindings;
    }
    case PreflightVerdict::kBadConfig:
      verdict << "preflight: bad input: " << DescribePreflightFailure(*report) << std::endl;
      return kPreflightBadInput;
    case PreflightVerdict::kRunnerFailed:
    case PreflightVerdict::kTimedOut:
    case PreflightVerdict::kCancelled:
      break;
  }
  verdict << "preflight: runner failure: " << DescribePreflightFailure(*report) << std::endl;
  return kPreflightRunnerFailed;
}

}  // namespace trainyard::cli
