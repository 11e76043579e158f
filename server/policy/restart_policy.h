// Whether a failed attempt is retried, how long the restart waits, and the sentences
// a user reads about it. Pure: no I/O, no locks, no clock (times come in as values).
//
// Thread-safe (stateless).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "absl/time/time.h"
#include "trainyard/v1/spec.pb.h"

namespace trainyard {

struct RestartDecision {
  bool restart = false;
  // The reason recorded with the new state: RESTARTING's ("<cause>; restart 1 of 2")
  // or FAILED's (the one cause, or every attempt's cause when restarts were used).
  std::string reason;
  // restart: how long after the failure the job may be placed again.
  absl::Duration backoff = absl::ZeroDuration();
};

class RestartPolicy {
 public:
  // A stored cause is cut to this many bytes (on a UTF-8 boundary, "..." appended).
  static constexpr std::size_t kMaxCauseBytes = 200;
  // Job.failure_causes keeps the newest this many causes.
  static constexpr int kMaxStoredCauses = 32;
  // A FAILED reason lists the newest this many causes.
  static constexpr int kCausesInReason = 10;
  // Restart.backoff_s doubles per restart up to this.
  static constexpr absl::Duration kMaxBackoff = absl::Hours(1);
  // A worker where a job's attempts failed this often is avoided for the job.
  static constexpr int kAvoidAfterFailures = 2;

  // `cause` cut to kMaxCauseBytes.
  static std::string TrimCause(std::string_view cause);
  // Appends TrimCause(cause) to `causes`, dropping the oldest past kMaxStoredCauses.
  static void AppendCause(std::string_view cause, std::vector<std::string>* causes);

  // The wait before restart k (1, 2, ...): backoff_s · 2^(k-1), at most kMaxBackoff.
  static absl::Duration Backoff(const v1::RestartSpec& spec, int k);

  // `restarts_used`: attempts already restarted (the failed attempt's number - 1).
  // `causes`: Job.failure_causes with this failure's cause already appended (oldest
  // first, the last one is the failed attempt's). Restarts while restarts_used <
  // spec.max_restarts (unset counts as 0), else fails: with the cause alone when it is
  // the only one, else with "failed N attempts (restart.max_restarts=M): attempt 1:
  // ... | attempt 2: ...", the newest kCausesInReason listed.
  // `permanent`: the failure cannot pass on a retry (a rank exited with
  // kRankExitInputError, common/events/rank_exit.h: the job's dataset or initial
  // weights are wrong), so the job fails at once whatever restarts remain, its reason
  // saying so.
  static RestartDecision Decide(const v1::RestartSpec& spec, int restarts_used,
                                const std::vector<std::string>& causes, bool permanent = false);

  // A PENDING job's reason while restart k of `max_restarts` backs off:
  // "restarting: backing off until 2023-11-14T22:13:21Z (restart 1 of 3)".
  static std::string BackoffReason(absl::Time until, int k, int max_restarts);
};

}  // namespace trainyard
