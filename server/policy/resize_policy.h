// Whether a job may be resized to a data-parallel degree now (`trainyard resize`,
// JobService.ResizeJob), and the sentences its events carry. Pure: no I/O, no locks,
// no clock. The resized spec itself is ElasticPolicy::Resize's, so a resize and an
// elastic shrink build the same layout (grad_accum_steps scaled to keep the global
// batch, ep' = gcd(ep, dp'·tp), every spec rule checked).
//
// Thread-safe (stateless).
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "trainyard/v1/job.pb.h"

namespace trainyard {

struct ResizePlan {
  bool no_op = false;  // the job already runs at (or will restart at) the dp asked for
  int from_dp = 0;     // the running attempt's dp, or the dp its restart would place
};

class ResizePolicy {
 public:
  // Every job_state reason a resize writes starts with this and the target dp; a
  // controller restart reads the target back from the stored events (TargetOf).
  static constexpr char kReasonPrefix[] = "resize to dp=";

  // `live`: the job runs an attempt (SCHEDULED or RUNNING, not being torn down), which
  // a resize replaces; else it is PENDING or RESTARTING and only its restart changes.
  // `current_dp`: the live attempt's dp, or the dp its restart would place.
  // FAILED_PRECONDITION: the job ended, never started, or (live) takes no checkpoints.
  // INVALID_ARGUMENT naming ResizeJobRequest.dp: dp outside [max(1, restart.min_dp),
  // parallelism.dp], or no valid layout at dp (ElasticPolicy::Resize).
  static absl::StatusOr<ResizePlan> Plan(const v1::Job& job, bool live, int current_dp, int dp);

  // The job_state reason of a resize from `from_dp` to `dp`: for a live job (which
  // restarts now) it names the checkpoint step the restart resumes from.
  static std::string Reason(const v1::Job& job, bool live, int from_dp, int dp);
  // What the workers' Cancel says: "resize to dp=2 requested".
  static std::string CancelReason(int dp);
  // The dp a reason written by Reason names; nullopt for any other reason.
  static std::optional<int> TargetOf(std::string_view reason);
};

}  // namespace trainyard
