#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/base/clock.h"
#include "common/base/process_launcher.h"
#include "common/preflight_memory.h"
#include "trainyard/v1/event.pb.h"
#include "trainyard/v1/spec.pb.h"

namespace trainyard {

// How a preflight ended. The runner's exit status is the contract with the engine:
// `trainyard-train JOB.json --preflight [--shrink] --json` exits 0 when clean, 3 when
// it printed an UNSAFE_SIDE_EFFECT or RECOMPILE_LIMIT event, 2 on a bad config or
// usage, 1 when a rank failed; with --print-config instead of --json it prints the spec
// it would run (spec::ToJson) and starts no rank.
enum class PreflightVerdict {
  kClean,
  kFindings,
  kBadConfig,     // exit status 2
  kRunnerFailed,  // exit status 1, any other status, or killed by a signal
  kTimedOut,      // ran past PreflightOptions::timeout; its process group was killed
  kCancelled,     // the caller cancelled the run; its process group was killed
  kTooBig,        // its ranks would need more memory than this machine can give: not started
};

// "clean", "findings", "bad_config", "failed", "timeout", "cancelled", and "refused"
// for kTooBig (no runner ran, as for the gate's other refusals): the metric label.
const char* PreflightVerdictName(PreflightVerdict verdict);

struct PreflightReport {
  PreflightVerdict verdict = PreflightVerdict::kRunnerFailed;
  ProcessExit exit;
  // UNSAFE_SIDE_EFFECT and RECOMPILE_LIMIT events, in the order they were printed.
  std::vector<v1::Event> findings;
  int compile_events = 0;  // every compile event printed, findings included
  // Message of the last `log` event with level "error"; kTooBig: the refusal
  // (PreflightFit::refusal); kRunnerFailed before the run: why its config was unusable.
  std::string error;
  // The end of stderr (and of any stdout line that is not an Event), at most
  // kPreflightTailBytes, cut at a line start.
  std::string output_tail;
  absl::Duration elapsed;
  // Set once the runner's config was read: the memory its ranks need against what this
  // machine can give, and the cap the run had.
  std::optional<PreflightFit> fit;
};

inline constexpr size_t kPreflightTailBytes = 4096;

struct PreflightOptions {
  std::string binary;  // trainyard-train
  bool shrink = false;  // pass --shrink
  absl::Duration timeout = absl::Seconds(300);  // absl::InfiniteDuration(): no limit
  std::string spec_dir;  // an existing directory for the JobSpec JSON handed to the runner
  // What this machine can give the runner; unset: ReadHostMemory() (preflight_memory.h).
  std::function<absl::StatusOr<HostMemory>()> host_memory;
};

// Runs one preflight: writes the JobSpec as proto3 JSON to a temporary file in
// `spec_dir`; asks `binary FILE --preflight [--shrink] --print-config` what it would
// run and holds that against what this machine can give (FitRunner): a runner that does
// not fit is never started (kTooBig, with the figures and what to do); then runs
// `binary FILE --preflight [--shrink] --json` through the launcher (its own process
// group) under RLIMIT_DATA = PreflightFit::data_limit_bytes, which its ranks inherit,
// reads its Event lines and decides the verdict from the exit status. An exit status
// of 0 with a finding printed anyway counts as kFindings: the events win over the
// status. A --print-config that fails ends the preflight with that verdict (exit 2:
// kBadConfig). The temporary file is removed before Run returns. The timeout covers
// both runs.
//
// Time (the timeout, the cancel polling, `elapsed`) comes from the injected Clock, so a
// test can drive the timeout with a fake one.
//
// Thread-safe: Run may be called from several threads at once; each call blocks until
// the runner and its process group are gone.
class PreflightRunner {
 public:
  // Sees each stdout line and the Event it parses to (nullptr when it is not one).
  // Called on a reader thread owned by Run, one line at a time, in order.
  using LineCallback = std::function<void(const std::string& line, const v1::Event* event)>;

  PreflightRunner(ProcessLauncher* launcher, PreflightOptions options,
                  Clock* clock = SystemClock())
      : launcher_(launcher), options_(std::move(options)), clock_(clock) {}

  // Polled every 50 ms (of the clock) while the runner runs; true kills its process
  // group.
  using CancelCheck = std::function<bool()>;

  // Errors (no verdict): the spec file cannot be written or this machine's memory
  // cannot be read (UNAVAILABLE), or the binary cannot be started
  // (FAILED_PRECONDITION "cannot execute PATH: ..."). When
  // `cancelled` returns true during the run, the runner's process group is killed and
  // the verdict is kCancelled.
  absl::StatusOr<PreflightReport> Run(const v1::JobSpec& normalised,
                                      const LineCallback& on_line = nullptr,
                                      const CancelCheck& cancelled = nullptr) const;

  const PreflightOptions& options() const { return options_; }

 private:
  class OutputTail;
  // One process of the runner, run to its end (or killed at `deadline` or on cancel).
  struct Child {
    absl::Status launch;  // not OK: it never started
    ProcessExit exit;
    bool timed_out = false;
    bool cancelled = false;
  };
  Child RunChild(const LaunchRequest& request, absl::Time deadline,
                 const std::function<void(const std::string&)>& on_stdout, const CancelCheck& cancel,
                 OutputTail* tail) const;

  ProcessLauncher* const launcher_;
  const PreflightOptions options_;
  Clock* const clock_;
};

// UNSAFE_SIDE_EFFECT and RECOMPILE_LIMIT: the kinds that fail a preflight.
bool IsPreflightFinding(v1::CompileEvent::Kind kind);

// The compile kinds a preflight shows: COMPILE, RECOMPILE, RECOMPILE_LIMIT,
// GRAPH_BREAK, UNSAFE_SIDE_EFFECT and FALLBACK (not SUMMARY).
bool IsShownPreflightKind(v1::CompileEvent::Kind kind);

// One line for a compile event, e.g.
//   rank 0  UNSAFE_SIDE_EFFECT  region=moe_router layers=[1]  layers.1.moe.tokens_per_expert ...
std::string FormatPreflightEvent(const v1::Event& event);

// The findings in one line, identical findings of several ranks merged, e.g.
//   "ranks 0,1 UNSAFE_SIDE_EFFECT region=moe_router layers=[1]: <reason>; rank 0 ..."
// At most `max_items` distinct findings, then "(and N more)".
std::string SummarizeFindings(const std::vector<v1::Event>& findings, size_t max_items = 8);

// Why a non-clean, non-findings preflight failed, e.g.
//   "runner exited with code 1: rank 1: step 2: ..." or
//   "timed out after 300.0s (its process group was killed); last output: ...".
std::string DescribePreflightFailure(const PreflightReport& report);

}  // namespace trainyard
