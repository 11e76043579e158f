#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "client/job_client.h"
#include "common/base/clock.h"
#include "trainyard/v1/job_service.pb.h"

namespace trainyard {

// SUCCEEDED, FAILED or CANCELLED: the states a job never leaves.
bool IsTerminal(v1::Job::State state);

// A broken stream (the controller restarted, the network dropped) rather than a
// refusal: worth reconnecting. UNAVAILABLE, DEADLINE_EXCEEDED, ABORTED, INTERNAL, UNKNOWN.
bool Reconnectable(const absl::Status& status);

// Follows one job's event stream to its terminal job_state event across broken streams:
// each reconnect (after a backoff that doubles from first_backoff to max_backoff) resumes
// at the seq after the last event delivered, and an event a server replays again is
// dropped, so `on_event` sees every seq from `from_seq` once, in order. Only a stream
// that delivered something is resumed: a first call that fails is the result at once.
// During an outage each try first asks GetJob, so a resumed stream with nothing to say
// (a PENDING job) still ends the outage; only one such probe may end it per new event,
// so a stream that keeps breaking at the same seq still gives up after reconnect_for.
//
// Not thread-safe itself; run one per job (the JobClient may be shared between them).
class JobWatch {
 public:
  struct Options {
    int64_t from_seq = 0;                        // 0 or 1: from the start
    absl::Duration reconnect_for = absl::Seconds(300);  // zero: the first break is final
    absl::Duration first_backoff = absl::Milliseconds(250);
    absl::Duration max_backoff = absl::Seconds(5);
    Clock* clock = SystemClock();  // times the outage and sleeps the backoff
  };
  // What the watcher hears; every member but on_event may be empty.
  struct Callbacks {
    std::function<void(const v1::Event&)> on_event;
    // An outage began: `why` broke the stream; the next event wanted is `resume_seq`.
    std::function<void(const absl::Status& why, int64_t resume_seq)> on_outage;
    // Try `retry` (1, 2, ...) of this outage follows after `backoff`.
    std::function<void(int retry, absl::Duration backoff)> on_retry;
    // The controller answers again after `outage`; the stream resumes at `resume_seq`.
    std::function<void(absl::Duration outage, int64_t resume_seq)> on_reconnected;
  };
  struct Result {
    absl::Status status;                      // OK: end_state is set (unless cancelled)
    std::optional<v1::Job::State> end_state;  // the job's terminal state
    // Set when status is the last break and reconnecting stopped after this long.
    std::optional<absl::Duration> gave_up_after;
    int64_t last_seq = 0;  // the last seq delivered to on_event
  };

  JobWatch(JobClient* client, Options options) : client_(client), options_(options) {}

  Result Run(const std::string& job_id, const Callbacks& callbacks);

 private:
  JobClient* client_;
  const Options options_;
};

}  // namespace trainyard
