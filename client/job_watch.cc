#include "client/job_watch.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace trainyard {

bool IsTerminal(v1::Job::State state) {
  return state == v1::Job::SUCCEEDED || state == v1::Job::FAILED || state == v1::Job::CANCELLED;
}

bool Reconnectable(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDeadlineExceeded:
    case absl::StatusCode::kAborted:
    case absl::StatusCode::kInternal:
    case absl::StatusCode::kUnknown:
      return true;
    default:
      return false;
  }
}

JobWatch::Result JobWatch::Run(const std::string& id, const Callbacks& callbacks) {
  Clock* clock = options_.clock;
  int64_t last_seq = options_.from_seq > 0 ? options_.from_seq - 1 : 0;
  bool connected = false;
  std::optional<absl::Time> outage_since;
  int retries = 0;
  absl::Duration backoff = options_.first_backoff;
  // Whether a probe ended an outage since the last new event (see the class comment).
  bool probe_ended_outage = false;
  auto end_outage = [&] {
    if (!outage_since.has_value()) return;
    if (callbacks.on_reconnected) callbacks.on_reconnected(clock->Now() - *outage_since, last_seq + 1);
    outage_since.reset();
    retries = 0;
    backoff = options_.first_backoff;
  };
  auto result = [&](absl::Status status, std::optional<v1::Job::State> end_state) {
    return Result{std::move(status), end_state, std::nullopt, last_seq};
  };
  while (true) {
    std::optional<v1::Job::State> end_state;
    absl::Status status;
    if (outage_since.has_value()) {
      // Ask the controller first: when it answers, the outage is over even if the
      // resumed stream has nothing to send for a long time (a PENDING job waiting for
      // slots); otherwise a later break would count from this outage's start.
      absl::StatusOr<v1::Job> probe = client_->GetJob(id);
      if (probe.ok()) {
        if (!probe_ended_outage) {
          probe_ended_outage = true;
          end_outage();
        }
      } else {
        status = probe.status();
      }
    }
    if (status.ok()) {
      status = client_->Watch(id, last_seq + 1, [&](const v1::Event& event) {
        connected = true;
        end_outage();
        if (event.seq() <= last_seq) return true;  // replayed across a reconnect
        last_seq = event.seq();
        probe_ended_outage = false;
        if (callbacks.on_event) callbacks.on_event(event);
        if (event.has_job_state() && IsTerminal(event.job_state().state())) {
          end_state = event.job_state().state();
        }
        return true;
      });
      if (end_state.has_value()) return result(absl::OkStatus(), end_state);
      if (status.ok()) {
        // The stream ended without the terminal event: ask for the state.
        absl::StatusOr<v1::Job> job = client_->GetJob(id);
        if (job.ok() && IsTerminal(job->state())) return result(absl::OkStatus(), job->state());
        status = job.ok() ? absl::UnavailableError(absl::StrCat(
                                "the event stream of job ", id, " ended while the job is ",
                                v1::Job::State_Name(job->state())))
                          : job.status();
      }
    }
    if (!connected || !Reconnectable(status) || options_.reconnect_for <= absl::ZeroDuration()) {
      return result(status, std::nullopt);
    }
    const absl::Time now = clock->Now();
    if (!outage_since.has_value()) {
      outage_since = now;
      if (callbacks.on_outage) callbacks.on_outage(status, last_seq + 1);
    } else if (now - *outage_since >= options_.reconnect_for) {
      Result gave_up = result(status, std::nullopt);
      gave_up.gave_up_after = now - *outage_since;
      return gave_up;
    }
    ++retries;
    if (callbacks.on_retry) callbacks.on_retry(retries, backoff);
    clock->SleepFor(backoff);
    backoff = std::min(backoff * 2, options_.max_backoff);
  }
}

}  // namespace trainyard
