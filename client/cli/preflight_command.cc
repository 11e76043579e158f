#include "client/cli/preflight_command.h"

#include "absl/strings/str_cat.h"
#include "client/cli/cli_format.h"
#include "client/cli/memory_format.h"
#include "common/spec/job_file_reader.h"
#include "common/spec/memory_estimate.h"
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

// "runner:     1 rank of 36.2 MiB estimated (+ 768 MiB LibTorch's own), each capped at
// 18.3 GiB (RLIMIT_DATA) of the 19.3 GiB this machine can give (MemAvailable ...)".
std::string FormatRunnerCap(const PreflightFit& fit, bool shrunk) {
  return absl::StrCat("runner:     ", fit.world == 1 ? std::string("1 rank") : absl::StrCat(fit.world, " ranks"),
                      shrunk ? " of the shrunk model, " : ", ", spec::FormatBytes(fit.rank_estimate),
                      " estimated (+ ", spec::FormatBytes(kRunnerRankOverheadBytes),
                      " LibTorch's own), each process capped at ",
                      spec::FormatBytes(static_cast<double>(fit.data_limit_bytes)), " (RLIMIT_DATA) of the ",
                      spec::FormatBytes(fit.host.available_bytes), " this machine can give (", fit.host.source, ")\n");
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
  std::ostream& verdict = options.json ? err : out;
  // A shrunk run says nothing of whether the model itself fits anywhere: hold the full
  // model against the fleet, as the controller will at submit.
  bool fits_no_worker = false;
  if (options.shrink) {
    absl::StatusOr<std::vector<v1::WorkerInfo>> workers =
        options.list_workers ? options.list_workers()
                             : absl::StatusOr<std::vector<v1::WorkerInfo>>(absl::UnavailableError("no controller given"));
    if (workers.ok()) {
      const FleetFit fleet = FitFleet(*core, *workers);
      fits_no_worker = fleet.known && !fleet.fits;
      verdict << fleet.text << std::flush;
    } else {
      verdict << "fleet:      not checked: " << workers.status().message()
              << "; whether the full model fits a worker is unknown" << std::endl;
    }
  }
  const v1::JobSpec spec = ProtoFromSpec(*core);

  PreflightOptions runner_options;
  runner_options.binary = options.train_binary;
  runner_options.shrink = options.shrink;
  runner_options.timeout = absl::Seconds(options.timeout_s);
  runner_options.spec_dir = options.spec_dir;
  runner_options.host_memory = options.host_memory;
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
  if (!report.ok()) {
    verdict << "preflight: runner failure: " << report.status().message() << std::endl;
    return kPreflightRunnerFailed;
  }
  if (report->verdict == PreflightVerdict::kTooBig) {
    verdict << "preflight: refused, no runner was started: "
            << DescribeRefusal(*report->fit,
                               options.shrink ? ""
                                              : "--shrink runs the same structure (layers, experts, layout) at small "
                                                "widths")
            << std::endl;
    return kPreflightBadInput;
  }
  if (report->fit.has_value()) verdict << FormatRunnerCap(*report->fit, options.shrink);
  switch (report->verdict) {
    case PreflightVerdict::kClean:
      if (fits_no_worker) {
        verdict << "preflight: FINDINGS: the shrunk run was clean (" << report->compile_events
                << " compile events), but the full model fits no worker of the fleet (the fleet: line above)"
                << std::endl;
        return kPreflightFindings;
      }
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
    case PreflightVerdict::kTooBig:
      break;
  }
  verdict << "preflight: runner failure: " << DescribePreflightFailure(*report) << std::endl;
  return kPreflightRunnerFailed;
}

}  // namespace trainyard::cli
