#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/cli/cli_format.h"
#include "client/cli/command_runner.h"
#include "client/cli/sweep_format.h"
#include "common/events/proto_json.h"

namespace trainyard::cli {

absl::StatusOr<SweepClient*> Runner::Sweeps() {
  if (sweeps_ == nullptr) return absl::FailedPreconditionError("this command was run without a sweep client");
  return sweeps_.get();
}

int Runner::SubmitSweep(const SweepSubmission& submission, const v1::JobSpec& spec, bool wait) {
  absl::StatusOr<SweepClient*> sweeps = Sweeps();
  if (!sweeps.ok()) return Fail(sweeps.status());
  v1::SubmitSweepRequest request = BuildSubmitSweepRequest(submission.job);
  *request.mutable_spec() = spec;  // with --after
  absl::StatusOr<v1::SweepView> view = (*sweeps)->SubmitSweep(request);
  if (!view.ok()) return FailSweepCall(view.status());
  if (options_.Json()) {
    out_ << ToJsonLine(*view) << std::endl;
  } else {
    out_ << TerminalSafe(FormatSubmittedSweep(*view), /*keep_newlines=*/true);
    out_.flush();
  }
  return wait ? WatchSweep(view->sweep().id(), WatchOptions{}) : kExitOk;
}

int Runner::GetSweep(const std::string& id) {
  absl::StatusOr<SweepClient*> sweeps = Sweeps();
  if (!sweeps.ok()) return Fail(sweeps.status());
  absl::StatusOr<v1::SweepView> view = (*sweeps)->GetSweep(id);
  if (!view.ok()) return FailSweepCall(view.status());
  if (options_.Json()) {
    out_ << ToJsonLine(*view) << '\n';
  } else {
    // Labels, names and reasons came from job files and ranks.
    out_ << TerminalSafe(FormatSweepDescription(*view), /*keep_newlines=*/true);
  }
  out_.flush();
  return kExitOk;
}

int Runner::CancelSweep(const std::string& id, const std::string& reason) {
  absl::StatusOr<SweepClient*> sweeps = Sweeps();
  if (!sweeps.ok()) return Fail(sweeps.status());
  // The view before tells the children this cancel ended from those already ended.
  absl::StatusOr<v1::SweepView> before = (*sweeps)->GetSweep(id);
  if (!before.ok()) return FailSweepCall(before.status());
  absl::StatusOr<v1::SweepView> after = (*sweeps)->CancelSweep(id, reason);
  if (!after.ok()) return FailSweepCall(after.status());
  if (options_.Json()) {
    out_ << ToJsonLine(*after) << '\n';
  } else {
    out_ << TerminalSafe(FormatSweepCancel(*before, *after), /*keep_newlines=*/true);
  }
  out_.flush();
  return kExitOk;
}

int Runner::WatchSweep(const std::string& id, const WatchOptions& watch) {
  absl::StatusOr<SweepClient*> sweeps = Sweeps();
  if (!sweeps.ok()) return Fail(sweeps.status());
  std::optional<v1::SweepView> last;
  std::optional<absl::Time> outage_since;
  const absl::Duration reconnect_for = absl::Seconds(watch.reconnect_for_s);
  while (true) {
    absl::StatusOr<v1::SweepView> view = (*sweeps)->GetSweep(id);
    if (!view.ok()) {
      // As a job's watch: the first call's error is final; a controller that goes away
      // later (a restart) is waited for.
      const bool outage = absl::IsUnavailable(view.status()) || absl::IsDeadlineExceeded(view.status());
      if (!last.has_value() || !outage) return FailSweepCall(view.status());
      const absl::Time now = env_.clock->Now();
      if (!outage_since.has_value()) {
        outage_since = now;
        std::string why(view.status().message().substr(0, 80));
        if (view.status().message().size() > 80) why += "...";
        err_ << TerminalSafe(absl::StrCat("trainyard: connection to the controller lost (",
                                          absl::StatusCodeToString(view.status().code()), ": ", why,
                                          "); retrying for up to ", HumanDuration(reconnect_for)))
             << std::endl;
      }
      if (now - *outage_since >= reconnect_for) {
        return Fail(
            absl::Status(view.status().code(), absl::StrCat(view.status().message(), " (gave up reconnecting after ",
                                                            HumanDuration(now - *outage_since), ", --reconnect-for)")));
      }
      env_.clock->SleepFor(kSweepPollInterval);
      continue;
    }
    if (outage_since.has_value()) {
      err_ << "trainyard: reconnected after " << HumanDuration(env_.clock->Now() - *outage_since) << std::endl;
      outage_since.reset();
    }
    const std::vector<std::string> lines = SweepChangeLines(last.has_value() ? &*last : nullptr, *view);
    if (options_.Json()) {
      if (!last.has_value() || !lines.empty()) out_ << ToJsonLine(*view) << '\n';
    } else {
      for (const std::string& line : lines) out_ << TerminalSafe(line) << '\n';
    }
    out_.flush();
    last = std::move(*view);
    if (last->ended()) break;
    env_.clock->SleepFor(kSweepPollInterval);
  }
  if (!options_.Json()) {
    out_ << '\n'
         << TerminalSafe(absl::StrCat(id, " ended: ", FormatStateCounts(SweepStateCounts(*last)), "\n",
                                      FormatSweepRanking(*last)),
                         /*keep_newlines=*/true);
    out_.flush();
  }
  return SweepExitCode(*last);
}

int Runner::FailSweepCall(const absl::Status& status) {
  if (absl::IsUnimplemented(status)) {
    return Fail(absl::UnimplementedError(absl::StrCat(status.message(), " (the controller at ", options_.controller,
                                                      " has no sweeps; it is older than this CLI)")));
  }
  return Fail(status);
}

}  // namespace trainyard::cli
