#include "server/policy/resize_policy.h"

#include <algorithm>
#include <cctype>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/spec/rules.h"
#include "server/policy/elastic_policy.h"

namespace trainyard {
namespace {

bool IsTerminal(v1::Job::State s) {
  return s == v1::Job::SUCCEEDED || s == v1::Job::FAILED || s == v1::Job::CANCELLED;
}

}  // namespace

absl::StatusOr<ResizePlan> ResizePolicy::Plan(const v1::Job& job, bool live, int current_dp, int dp) {
  const std::string& id = job.id();
  if (IsTerminal(job.state())) {
    return absl::FailedPreconditionError(absl::StrCat("job ", id, " already ended ", v1::Job::State_Name(job.state()),
                                                      "; only a scheduled, running or restarting job can be resized"));
  }
  if (job.attempt() < 1) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", id, " has not started yet (PENDING); only a scheduled, running or restarting job can "
                     "be resized: cancel it and submit it with parallelism.dp=", dp));
  }
  const v1::JobSpec& spec = job.spec();
  const int min_dp = spec.restart().min_dp();
  const int lo = std::max(1, min_dp);
  const int hi = spec.parallelism().dp();
  if (dp < lo || dp > hi) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ResizeJobRequest.dp: must be in [", lo, ", ", hi, "] for job ", id, " (",
        min_dp > 0 ? absl::StrCat("restart.min_dp=", min_dp, ", ") : std::string(), "parallelism.dp=", hi,
        " as submitted; a job never grows past it), got ", dp));
  }
  if (absl::StatusOr<ElasticLayout> layout = ElasticPolicy::Resize(spec, dp); !layout.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("ResizeJobRequest.dp: job ", id, " cannot run at dp=", dp, ": ",
                                                   layout.status().message()));
  }
  ResizePlan plan{dp == current_dp, current_dp};
  if (plan.no_op || !live) return plan;  // a restart loses nothing more by resizing
  if (spec.checkpoint().interval() <= 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", id, " takes no checkpoints (checkpoint.interval=0), so a resize would restart it from "
                     "step 0 and lose its progress; cancel and resubmit it with parallelism.dp=", dp, " instead"));
  }
  return plan;
}

std::string ResizePolicy::Reason(const v1::Job& job, bool live, int from_dp, int dp) {
  const v1::JobSpec& spec = job.spec();
  const int64_t grad_accum_steps = int64_t{spec.parallelism().dp()} * spec.training().grad_accum_steps() / dp;
  std::string out = absl::StrCat(kReasonPrefix, dp, " requested (was ", from_dp, "; grad_accum_steps=",
                                 grad_accum_steps, " keeps the global batch): ");
  if (!live) return absl::StrCat(out, "the restart places dp=", dp);
  const int64_t step = job.last_checkpoint().step();
  absl::StrAppend(&out, "restarting ",
                  step > 0 ? absl::StrCat("from the checkpoint of step ", step)
                           : std::string("from step 0 (no checkpoint saved yet)"),
                  ", not counted against restart.max_restarts");
  return out;
}

std::string ResizePolicy::CancelReason(int dp) { return absl::StrCat(kReasonPrefix, dp, " requested"); }

std::optional<int> ResizePolicy::TargetOf(std::string_view reason) {
  const std::string_view prefix(kReasonPrefix);
  if (reason.substr(0, prefix.size()) != prefix) return std::nullopt;
  const std::string_view rest = reason.substr(prefix.size());
  std::size_t n = 0;
  while (n < rest.size() && std::isdigit(static_cast<unsigned char>(rest[n]))) ++n;
  int dp = 0;
  if (n == 0 || n > 6 || !absl::SimpleAtoi(absl::string_view(rest.data(), n), &dp) || dp < 1 || dp > spec::kMaxWorldSize) return std::nullopt;
  return dp;
}

}  // namespace trainyard
