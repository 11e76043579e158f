// JobLifecycle: quotas and fair share under the controller's --policy-file. Which
// queued jobs are held by a quota, each owner's running slots and decayed usage, and
// where an owner stands (Job.share).
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/state/job_lifecycle.h"
#include "spdlog/spdlog.h"

namespace trainyard {

void JobLifecycle::SetPolicy(SharingPolicy policy) {
  policy_ = std::move(policy);
  ledger_.SetHalfLife(policy_.HalfLife(), clock_->Now());
}

std::map<std::string, SlotUse> JobLifecycle::InUseByOwner() const {
  std::map<std::string, SlotUse> out;
  for (const auto& [id, rt] : jobs_) {
    if (rt.live <= 0) continue;
    SlotUse& use = out[rt.job.owner()];
    const auto& placement = rt.job.placement();
    for (size_t r = 0; r < rt.ranks.size(); ++r) {
      if (rt.ranks[r] == RankPhase::kEnded) continue;
      ++use.slots;
      if (static_cast<int>(r) < placement.ranks_size() && placement.ranks(static_cast<int>(r)).has_gpu()) ++use.gpus;
    }
  }
  return out;
}

SlotUse JobLifecycle::NeedsOf(const v1::JobSpec& spec) {
  const int world = spec.parallelism().dp() * spec.parallelism().tp();
  return SlotUse{world, spec.resources().device() == "cuda" ? world : 0};
}

void JobLifecycle::QuotaHold(TrackedJob& rt, const std::string& why, Effects* fx) {
  rt.estimated_start.reset();
  rt.reserved_workers.clear();
  rt.queue_position = 0;
  const std::string reason = AfterEviction(rt, why);
  if (reason != rt.job.pending_reason()) SetState(rt, v1::Job::PENDING, reason, fx);
}

void JobLifecycle::HoldOverQuota(std::vector<QueuedJob>* queue, const std::map<std::string, SlotUse>& in_use,
                                 Effects* fx) {
  for (auto it = queue->begin(); it != queue->end();) {
    TrackedJob& rt = jobs_.at(it->id);
    const std::string why = QuotaCheck(policy_, in_use, rt.job.owner(), NeedsOf(*it->spec));
    if (why.empty()) {
      ++it;
      continue;
    }
    QuotaHold(rt, why, fx);
    it = queue->erase(it);
  }
}

void JobLifecycle::AccrueUsage() {
  const absl::Time now = clock_->Now();
  const std::map<std::string, SlotUse> in_use = InUseByOwner();
  owner_use_ = in_use;
  if (usage_until_ != absl::InfinitePast() && now > usage_until_) {
    for (const auto& [owner, use] : in_use) ledger_.Accrue(owner, use.slots, usage_until_, now);
  }
  usage_until_ = now;
  std::map<std::string, int> slots;
  for (const auto& [owner, use] : in_use) slots[owner] = use.slots;
  std::map<std::string, double> usage;
  for (const auto& [owner, entry] : ledger_.Snapshot()) usage[owner] = ledger_.Value(owner, now);
  metrics_->sharing().SetOwners(slots, usage);
}

std::map<std::string, StoredUsage> JobLifecycle::UsageSnapshot() const {
  std::map<std::string, StoredUsage> out;
  for (const auto& [owner, e] : ledger_.Snapshot()) out[owner] = StoredUsage{e.value, absl::ToUnixMillis(e.as_of)};
  return out;
}

void JobLifecycle::RestoreUsage(const std::map<std::string, StoredUsage>& usage) {
  std::map<std::string, UsageLedger::Entry> entries;
  for (const auto& [owner, u] : usage) entries[owner] = UsageLedger::Entry{u.slot_seconds, absl::FromUnixMillis(u.as_of_unix_ms)};
  ledger_.Restore(entries);
  spdlog::info("restored the fair-share usage of {} owner(s)", entries.size());
}

void JobLifecycle::FillShare(const std::string& id, v1::Job* job) const {
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return;
  const std::string& owner = it->second.job.owner();
  v1::ShareInfo share = ShareStanding(policy_, owner_use_, owner, ledger_.Value(owner, clock_->Now()));
  if (it->second.job.state() == v1::Job::PENDING && it->second.queue_position > 0) {
    share.set_queue_position(it->second.queue_position);
    share.set_queue_length(static_cast<int>(queue_order_.size()));
  }
  *job->mutable_share() = std::move(share);
}

}  // namespace trainyard
