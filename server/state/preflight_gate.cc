#include "server/state/preflight_gate.h"

#include <unistd.h>

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace trainyard {
namespace {

constexpr const char* kRefused = "refused";

}  // namespace

PreflightGate::PreflightGate(ProcessLauncher* launcher, ControllerMetrics* metrics,
                             PreflightGateOptions options, Clock* clock)
    : metrics_(metrics),
      options_(std::move(options)),
      runner_(launcher,
              PreflightOptions{options_.binary, /*shrink=*/false, options_.timeout,
                               options_.spec_dir, options_.host_memory},
              clock),
      thread_([this] { Loop(); }) {}

PreflightGate::~PreflightGate() { Stop(); }

void PreflightGate::Check(v1::JobSpec normalised, CancelCheck cancelled, Done done) {
  // Checked per request, not at start-up: a controller whose jobs never ask for a
  // preflight does not need the runner installed.
  if (access(options_.binary.c_str(), X_OK) != 0) {
    absl::Status status = absl::FailedPreconditionError(absl::StrCat(
        "compile.preflight=true, but the preflight runner ", options_.binary,
        " is missing or not executable; install trainyard-train next to trainyard-controller "
        "or start the controller with --preflight-binary PATH"));
    Record(kRefused, absl::ZeroDuration(), status);
    done(std::move(status));
    return;
  }
  absl::Status refused;
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) {
      refused = absl::UnavailableError("the controller is shutting down");
    } else if (static_cast<int>(queue_.size()) >= options_.max_queued) {
      refused = absl::ResourceExhaustedError(
          absl::StrCat("compile.preflight=true, but ", queue_.size(),
                       " preflights are already waiting (they run one at a time); try again "
                       "later"));
    } else {
      queue_.push_back(Request{std::move(normalised), std::move(cancelled), std::move(done)});
      return;
    }
  }
  Record(kRefused, absl::ZeroDuration(), refused);
  done(std::move(refused));
}

void PreflightGate::Stop() {
  std::deque<Request> dropped;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    dropped.swap(queue_);
  }
  for (Request& r : dropped) {
    absl::Status status = absl::UnavailableError("the controller is shutting down");
    Record(kRefused, absl::ZeroDuration(), status);
    r.done(std::move(status));
  }
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
}

void PreflightGate::Loop() {
  while (true) {
    Request request;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](PreflightGate* self) ABSL_EXCLUSIVE_LOCKS_REQUIRED(self->mu_) {
            return self->stopping_ || !self->queue_.empty();
          },
          this));
      if (queue_.empty()) return;  // stopping
      request = std::move(queue_.front());
      queue_.pop_front();
    }
    absl::Status status = RunOne(request);
    request.done(std::move(status));
  }
}

absl::Status PreflightGate::RunOne(const Request& request) {
  if (request.cancelled && request.cancelled()) {
    absl::Status status = absl::CancelledError("the client went away before the preflight ran");
    Record("cancelled", absl::ZeroDuration(), status);
    return status;
  }
  const std::string name = request.spec.job().name();
  spdlog::info("preflight of job name={} starting: {} (world size {})", name, options_.binary,
               request.spec.parallelism().dp() * request.spec.parallelism().tp());
  auto stopping = [this] {
    absl::MutexLock lock(&mu_);
    return stopping_;
  };
  absl::StatusOr<PreflightReport> report = runner_.Run(
      request.spec, nullptr,
      [&] { return (request.cancelled && request.cancelled()) || stopping(); });
  if (!report.ok()) {
    absl::Status status = absl::FailedPreconditionError(
        absl::StrCat("preflight failed: ", report.status().message()));
    Record("failed", absl::ZeroDuration(), status);
    return status;
  }
  absl::Status status;
  switch (report->verdict) {
    case PreflightVerdict::kClean:
      status = absl::OkStatus();
      break;
    case PreflightVerdict::kFindings: {
      std::string what = SummarizeFindings(report->findings);
      if (what.empty()) what = "the runner exited with status 3 but printed no finding event";
      status = absl::FailedPreconditionError(
          absl::StrCat("preflight findings, so no job was created: ", what,
                       " (compile.preflight=true ran 3 steps of this job on local CPU ranks; "
                       "`trainyard preflight JOB.toml` shows every compile event)"));
      break;
    }
    case PreflightVerdict::kCancelled:
      status = stopping() ? absl::UnavailableError("the controller is shutting down")
                          : absl::CancelledError("the client went away during the preflight");
      break;
    case PreflightVerdict::kTooBig:
      // The job may well fit a worker (admission checked that): what it does not fit is
      // the controller's own machine, where this preflight runs it whole.
      status = absl::FailedPreconditionError(absl::StrCat(
          "preflight refused, so no job was created: compile.preflight=true runs the job's ranks on the "
          "controller's machine, and ",
          DescribeRefusal(*report->fit,
                          "check it where it fits with `trainyard preflight JOB.toml --shrink` (the same structure at "
                          "small widths) and submit with compile.preflight=false")));
      break;
    case PreflightVerdict::kBadConfig:
    case PreflightVerdict::kRunnerFailed:
    case PreflightVerdict::kTimedOut:
      status = absl::FailedPreconditionError(
          absl::StrCat("preflight failed: ", DescribePreflightFailure(*report)));
      break;
  }
  Record(PreflightVerdictName(report->verdict), report->elapsed, status);
  spdlog::info("preflight of job name={} {} in {:.1f}s: {}", name,
               PreflightVerdictName(report->verdict), absl::ToDoubleSeconds(report->elapsed),
               status.ok() ? std::string("accepted") : std::string(status.message()));
  return status;
}

void PreflightGate::Record(const std::string& outcome, absl::Duration elapsed,
                           const absl::Status& status) {
  metrics_->PreflightFinished(outcome, elapsed);
  if (!status.ok() && status.code() != absl::StatusCode::kCancelled) metrics_->JobRejected();
}

}  // namespace trainyard
