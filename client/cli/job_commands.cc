#include <algorithm>
#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/cli/audit_format.h"
#include "client/cli/cli_format.h"
#include "client/cli/command_runner.h"
#include "client/cli/gpu_format.h"
#include "client/cli/memory_format.h"
#include "client/cli/sweep_format.h"
#include "client/cli/sweep_request.h"
#include "common/events/proto_json.h"
#include "common/spec/dependencies.h"
#include "common/spec_proto.h"

namespace trainyard::cli {

namespace {

// A submit with compile.preflight=true waits while the controller runs the preflight
// (up to its --preflight-timeout, 300 s by default, plus any queue), so unless
// --timeout is given its deadline is this instead of the per-call default.
constexpr std::chrono::minutes kPreflightSubmitTimeout{15};

}  // namespace

int Runner::Submit(const SubmitOptions& submit) {
  // A job file without a sweep reads as LoadJobFile reads it; with one, every point is
  // validated before anything is sent.
  absl::StatusOr<SweepSubmission> loaded =
      LoadSweepSubmission(submit.file, submit.sets, spec::SweepFlags{submit.sweeps, submit.max_concurrent});
  if (!loaded.ok()) return Fail(loaded.status());
  v1::JobSpec spec = ProtoFromInput(loaded->job.base);
  const std::vector<std::string>& after = submit.after;
  if (!after.empty()) {
    // --after adds to the file's job.after; the joined list is checked as the file's is.
    std::vector<std::string> entries;
    if (!spec.job().after().empty()) entries.push_back(spec.job().after());
    entries.insert(entries.end(), after.begin(), after.end());
    const std::string joined = absl::StrJoin(entries, ",");
    auto parsed = spec::ParseAfter(joined);
    if (!parsed.ok()) return Fail(absl::InvalidArgumentError("--after: " + parsed.error().message));
    spec.mutable_job()->set_after(spec::AfterText(parsed.value()));
  }
  if (loaded->points > 0) return SubmitSweep(*loaded, spec, submit.wait);
  std::optional<std::chrono::milliseconds> timeout;
  if (spec.compile().preflight() && !options_.timeout_given) timeout = kPreflightSubmitTimeout;
  absl::StatusOr<v1::Job> job = client_->SubmitJob(spec, timeout);
  if (!job.ok()) return Fail(job.status());
  if (options_.Json()) {
    out_ << ToJsonLine(*job) << std::endl;
  } else {
    out_ << job->id() << std::endl;
  }
  return submit.wait ? Watch({job->id()}, WatchOptions{}) : kExitOk;
}

int Runner::List(const std::vector<std::string>& state_names, int limit, bool with_sweep_children) {
  std::vector<v1::Job::State> states;
  for (const std::string& name : state_names) {
    absl::StatusOr<v1::Job::State> state = ParseJobState(name);
    if (!state.ok()) return Fail(state.status());
    // `--state RUNNING,RUNNING` means RUNNING; the controller refuses repeats.
    if (std::find(states.begin(), states.end(), *state) == states.end()) states.push_back(*state);
  }
  // JSON Lines stay one kind of object, every job: a sweep child carries its sweep_id.
  if (options_.Json() || sweeps_ == nullptr) {
    absl::StatusOr<std::vector<v1::Job>> jobs = client_->ListJobs(states, limit);
    if (!jobs.ok()) return Fail(jobs.status());
    if (options_.Json()) {
      for (const v1::Job& job : *jobs) out_ << ToJsonLine(job) << '\n';
    } else {
      out_ << TerminalSafe(FormatJobsTable(*jobs), /*keep_newlines=*/true);
    }
    out_.flush();
    return kExitOk;
  }
  // Sweeps first: children are left out of the jobs only when their sweeps can be shown.
  std::vector<v1::SweepView> sweeps;
  absl::StatusOr<std::vector<v1::SweepView>> listed = sweeps_->ListSweeps(limit);
  if (listed.ok()) {
    sweeps = SweepsWithChildrenIn(*listed, states);
  } else if (!absl::IsUnimplemented(listed.status())) {  // a controller older than sweeps has none
    return Fail(listed.status());
  }
  absl::StatusOr<std::vector<v1::Job>> jobs = sweeps_->ListJobs(states, limit, !with_sweep_children);
  if (!jobs.ok()) return Fail(jobs.status());
  std::string text = FormatJobsTable(*jobs);
  if (!sweeps.empty()) absl::StrAppend(&text, "\n", FormatSweepsTable(sweeps));
  out_ << TerminalSafe(text, /*keep_newlines=*/true);
  out_.flush();
  return kExitOk;
}

int Runner::Get(const std::string& id) {
  if (IsSweepId(id)) return GetSweep(id);
  absl::StatusOr<v1::Job> job = client_->GetJob(id);
  if (!job.ok()) return Fail(job.status());
  if (options_.Json()) {
    PrintJob(*job);
    out_.flush();
    return kExitOk;
  }
  absl::StatusOr<JobHistory> history = History(*job);
  if (!history.ok()) return Fail(history.status());
  // The description stands without the artifacts (a controller without them, or a
  // role that may not list them).
  absl::StatusOr<std::vector<v1::ArtifactInfo>> artifacts = client_->ListArtifacts(id);
  // Reasons, failure messages, worker names and paths come from ranks and workers.
  out_ << TerminalSafe(
      FormatJobDescription(*job, *history, artifacts.ok() ? *artifacts : std::vector<v1::ArtifactInfo>{},
                           artifacts.ok() ? "" : FormatError(artifacts.status())),
      /*keep_newlines=*/true);
  // Who stopped it, from the controller's audit log (names and reasons came from callers).
  out_ << TerminalSafe(FormatStoppedBy({job->stopped_by().begin(), job->stopped_by().end()}), /*keep_newlines=*/true);
  out_.flush();
  return kExitOk;
}

int Runner::Cancel(const std::string& id, const std::string& reason) {
  if (IsSweepId(id)) return CancelSweep(id, reason);
  absl::StatusOr<v1::Job> job = client_->CancelJob(id, reason);
  if (!job.ok()) return Fail(job.status());
  PrintJob(*job);
  out_.flush();
  return kExitOk;
}

int Runner::Resize(const std::string& id, int dp) {
  absl::StatusOr<v1::Job> job = client_->ResizeJob(id, dp);
  if (!job.ok()) return Fail(job.status());
  PrintJob(*job);
  out_.flush();
  return kExitOk;
}

int Runner::Explain(const std::string& id) {
  absl::StatusOr<v1::Job> job = client_->GetJob(id);
  if (!job.ok()) return Fail(job.status());
  absl::StatusOr<std::vector<v1::Job>> pending = client_->ListJobs({v1::Job::PENDING}, 1000);
  if (!pending.ok()) return Fail(pending.status());
  absl::StatusOr<std::vector<v1::WorkerInfo>> workers = client_->ListWorkers();
  if (!workers.ok()) return Fail(workers.status());
  if (options_.Json()) {
    out_ << ToJsonLine(*job) << '\n';
  } else {
    absl::StatusOr<JobHistory> history = History(*job);
    if (!history.ok()) return Fail(history.status());
    out_ << TerminalSafe(FormatExplain(*job, *pending, *workers, env_.clock->Now()) +
                             FormatMemoryEstimate(job->spec()) + FormatExplainHistory(*job, *history),
                         /*keep_newlines=*/true);
  }
  out_.flush();
  return kExitOk;
}

int Runner::Workers() {
  absl::StatusOr<std::vector<v1::WorkerInfo>> workers = client_->ListWorkers();
  if (!workers.ok()) return Fail(workers.status());
  if (options_.Json()) {
    for (const v1::WorkerInfo& w : *workers) out_ << ToJsonLine(w) << '\n';
  } else {
    out_ << TerminalSafe(FormatWorkersTable(*workers), /*keep_newlines=*/true);
  }
  out_.flush();
  return kExitOk;
}

}  // namespace trainyard::cli
