#include "server/policy/elastic_policy.h"

#include <algorithm>
#include <cstdint>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "common/spec_proto.h"

namespace trainyard {

absl::StatusOr<ElasticLayout> ElasticPolicy::Resize(const v1::JobSpec& spec, int dp) {
  const int old_dp = spec.parallelism().dp();
  const int64_t samples = int64_t{old_dp} * spec.training().grad_accum_steps();  // batches per step
  if (dp < 1 || samples % dp != 0) {
    return absl::InvalidArgumentError(absl::StrCat("parallelism.dp=", dp, " does not divide dp·grad_accum_steps=",
                                                   samples, ", so the global batch would change"));
  }
  v1::JobSpec resized = spec;
  const int tp = spec.parallelism().tp();
  const int ep = std::gcd(spec.parallelism().ep(), dp * tp);
  // The FSDP degree must divide the new dp: gcd keeps the shard groups as large as they
  // can be, and the EP rule with them (an ep that divided dp_shard·tp still divides
  // the new one; one that was a multiple of it still is). The replica degree is derived.
  const int dp_shard = std::gcd(std::max(1, spec.parallelism().dp_shard()), dp);
  resized.mutable_parallelism()->set_dp(dp);
  resized.mutable_parallelism()->set_ep(ep);
  resized.mutable_parallelism()->set_dp_shard(dp_shard);
  resized.mutable_parallelism()->set_dp_replicate(0);
  resized.mutable_training()->set_grad_accum_steps(static_cast<int>(samples / dp));
  absl::StatusOr<v1::JobSpec> valid = ResolveAndValidateProto(resized);
  if (!valid.ok()) return valid.status();
  return ElasticLayout{*std::move(valid), dp, static_cast<int>(samples / dp), ep, dp_shard};
}

std::optional<ElasticLayout> ElasticPolicy::Shrink(const std::string& job_id, const v1::JobSpec& spec,
                                                   const std::vector<WorkerSnapshot>& workers) {
  const int min_dp = spec.restart().min_dp();
  if (min_dp < 1) return std::nullopt;
  // Start at the most TP groups the free slots hold, so a large dp costs no validation
  // per impossible candidate.
  const int tp = std::max(1, spec.parallelism().tp());
  const int cap = spec.resources().ranks_per_worker();
  int64_t groups = 0;
  for (const auto& w : workers) groups += (cap > 0 ? std::min(w.free_slots, cap) : w.free_slots) / tp;
  const int64_t samples = int64_t{spec.parallelism().dp()} * spec.training().grad_accum_steps();
  const int64_t top = std::min<int64_t>(spec.parallelism().dp() - 1, groups);
  for (int dp = static_cast<int>(top); dp >= min_dp; --dp) {
    if (samples % dp != 0) continue;
    absl::StatusOr<ElasticLayout> layout = Resize(spec, dp);
    if (!layout.ok()) continue;
    if (GangScheduler::Place(job_id, layout->spec, workers).placed) return *std::move(layout);
  }
  return std::nullopt;
}

}  // namespace trainyard
