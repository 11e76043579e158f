#pragma once

#include <map>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "common/base/clock.h"
#include "server/metrics/controller_metrics.h"
#include "server/policy/gang_scheduler.h"
#include "server/policy/sharing_policy.h"
#include "server/state/tracked_job.h"
#include "server/store/job_store.h"
#include "trainyard/v1/job.pb.h"

namespace trainyard {

// Quotas and fair share under the controller's --policy-file (docs/sharing.md): the
// policy, each owner's slots and GPUs in use, and the decayed-usage ledger that orders
// equal priorities. Quota checks hold jobs through QuotaGate; the order is the
// scheduling cycle's sort stage.
//
// Not thread-safe; owned by JobManager, used only under its state mutex.
class FairShareManager {
 public:
  FairShareManager(ControllerMetrics* metrics, Clock* clock) : metrics_(metrics), clock_(clock) {}

  // Quotas, weights and the usage half-life; in force from the next scheduling pass.
  void SetPolicy(SharingPolicy policy);

  // Slots and GPUs held by each owner's ranks that have not ended.
  static std::map<std::string, SlotUse> InUseByOwner(const std::map<std::string, TrackedJob>& jobs);
  // What a queued job needs under its (maybe resized) spec.
  static SlotUse NeedsOf(const v1::JobSpec& spec);

  // Takes each owner's use as of now (a scheduling pass, a usage accrual), for the
  // quota checks and FillShare; a GetJob need not walk every job.
  void Observe(std::map<std::string, SlotUse> in_use) { owner_use_ = std::move(in_use); }
  const std::map<std::string, SlotUse>& owner_use() const { return owner_use_; }
  // Why `owner` may not take `needs` more on top of `use` (its own or its group's
  // quota, QuotaCheck's words); "" when it may.
  std::string OverQuota(const std::map<std::string, SlotUse>& use, const std::string& owner,
                        const SlotUse& needs) const;
  // Priority, then the owner's fair share (decayed usage / weight), then FIFO.
  void Order(std::vector<QueuedJob>* queue, const std::map<std::string, TrackedJob>& jobs) const;

  // Adds each owner's running slots (`in_use`) since the last call to its usage and
  // updates the owner gauges (Tick).
  void Accrue(std::map<std::string, SlotUse> in_use);
  // The usage ledger, to store and to restore after a restart.
  std::map<std::string, StoredUsage> UsageSnapshot() const;
  void RestoreUsage(const std::map<std::string, StoredUsage>& usage);
  // Where the job's owner stands (Job.share): quota, usage, fair share, and for a
  // PENDING job its place in a queue of `queue_length`, as of the last pass.
  void FillShare(const TrackedJob& rt, int queue_length, v1::Job* job) const;

 private:
  ControllerMetrics* const metrics_;
  Clock* const clock_;
  SharingPolicy policy_;
  UsageLedger ledger_;
  absl::Time usage_until_ = absl::InfinitePast();  // the ledger holds usage up to here
  std::map<std::string, SlotUse> owner_use_;
};

}  // namespace trainyard
