#include "server/state/quota_gate.h"

namespace trainyard {

std::optional<std::string> QuotaGate::Hold(const TrackedJob& rt, const QueuedJob& queued, absl::Time now) {
  const std::string why =
      fair_share_->OverQuota(fair_share_->owner_use(), rt.job.owner(), FairShareManager::NeedsOf(*queued.spec));
  if (why.empty()) return std::nullopt;
  return AfterEviction(rt, why);
}

}  // namespace trainyard
