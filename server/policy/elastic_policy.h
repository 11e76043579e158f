// Elastic shrink of a restarting gang: when a job with restart.min_dp > 0 has waited
// restart.elastic_wait_s without slots for its full dp, it may restart at a smaller
// dp' in [min_dp, dp) with the same global batch. Pure: no I/O, no locks, no clock.
//
// Thread-safe (stateless).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/policy/gang_scheduler.h"
#include "trainyard/v1/spec.pb.h"

namespace trainyard {

struct ElasticLayout {
  v1::JobSpec spec;  // the resized, normalised spec the attempt's ranks get
  int dp = 0;
  int grad_accum_steps = 0;
  int ep = 0;
  int dp_shard = 1;
};

class ElasticPolicy {
 public:
  // `spec` (normalised) at data-parallel degree `dp`: grad_accum_steps becomes
  // dp_old·grad_accum_steps/dp (so the global batch is unchanged), ep becomes
  // gcd(ep, dp·tp), parallelism.dp_shard becomes gcd(dp_shard, dp) and dp_replicate 0
  // (derived); the result is checked with every rule of the spec core.
  // INVALID_ARGUMENT when dp does not divide dp_old·grad_accum_steps or a rule fails.
  static absl::StatusOr<ElasticLayout> Resize(const v1::JobSpec& spec, int dp);

  // The largest dp' in [restart.min_dp, dp) that Resize accepts and whose gang
  // GangScheduler::Place fits on `workers`; nullopt when min_dp is 0 or none fits.
  static std::optional<ElasticLayout> Shrink(const std::string& job_id, const v1::JobSpec& spec,
                                             const std::vector<WorkerSnapshot>& workers);
};

}  // namespace trainyard
