#pragma once

#include <optional>
#include <string>

#include "server/state/fair_share_manager.h"
#include "server/state/queue_gate.h"

namespace trainyard {

// Holds a job whose owner (or the owner's group) would pass its quota with the job's
// slots or GPUs on top of what it runs at the start of the pass ("quota: alice uses 6
// of 8 slots; needs 4"), led by the eviction that sent it back to PENDING if one did.
// Two jobs of one owner that fit apart but not together are the plan stage's
// (SchedulingCycle).
class QuotaGate : public QueueGate {
 public:
  explicit QuotaGate(const FairShareManager* fair_share) : fair_share_(fair_share) {}
  const char* name() const override { return "quota"; }
  std::optional<std::string> Hold(const TrackedJob& rt, const QueuedJob& queued, absl::Time now) override;

 private:
  const FairShareManager* const fair_share_;
};

}  // namespace trainyard
