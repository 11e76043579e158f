#include "server/state/fair_share_manager.h"

#include <utility>

#include "spdlog/spdlog.h"

namespace trainyard {

void FairShareManager::SetPolicy(SharingPolicy policy) {
  policy_ = std::move(policy);
  ledger_.SetHalfLife(policy_.HalfLife(), clock_->Now());
}

std::map<std::string, SlotUse> FairShareManager::InUseByOwner(const std::map<std::string, TrackedJob>& jobs) {
  std::map<std::string, SlotUse> out;
  for (const auto& [id, rt] : jobs) {
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

SlotUse FairShareManager::NeedsOf(const v1::JobSpec& spec) {
  const int world = spec.parallelism().dp() * spec.parallelism().tp();
  return SlotUse{world, spec.resources().device() == "cuda" ? world : 0};
}

std::string FairShareManager::OverQuota(const std::map<std::string, SlotUse>& use, const std::string& owner,
                                        const SlotUse& needs) const {
  return QuotaCheck(policy_, use, owner, needs);
}

void FairShareManager::Order(std::vector<QueuedJob>* queue, const std::map<std::string, TrackedJob>& jobs) const {
  const absl::Time now = clock_->Now();
  OrderQueueByFairShare(queue, [&](const QueuedJob& q) {
    const std::string& owner = jobs.at(q.id).job.owner();
    return FairShare(policy_, owner, ledger_.Value(owner, now));
  });
}

void FairShareManager::Accrue(std::map<std::string, SlotUse> in_use) {
  const absl::Time now = clock_->Now();
  owner_use_ = std::move(in_use);
  if (usage_until_ != absl::InfinitePast() && now > usage_until_) {
    for (const auto& [owner, use] : owner_use_) ledger_.Accrue(owner, use.slots, usage_until_, now);
  }
  usage_until_ = now;
  std::map<std::string, int> slots;
  for (const auto& [owner, use] : owner_use_) slots[owner] = use.slots;
  std::map<std::string, double> usage;
  for (const auto& [owner, entry] : ledger_.Snapshot()) usage[owner] = ledger_.Value(owner, now);
  metrics_->sharing().SetOwners(slots, usage);
}

std::map<std::string, StoredUsage> FairShareManager::UsageSnapshot() const {
  std::map<std::string, StoredUsage> out;
  for (const auto& [owner, e] : ledger_.Snapshot()) out[owner] = StoredUsage{e.value, absl::ToUnixMillis(e.as_of)};
  return out;
}

void FairShareManager::RestoreUsage(const std::map<std::string, StoredUsage>& usage) {
  std::map<std::string, UsageLedger::Entry> entries;
  for (const auto& [owner, u] : usage) {
    entries[owner] = UsageLedger::Entry{u.slot_seconds, absl::FromUnixMillis(u.as_of_unix_ms)};
  }
  ledger_.Restore(entries);
  spdlog::info("restored the fair-share usage of {} owner(s)", entries.size());
}

void FairShareManager::FillShare(const TrackedJob& rt, int queue_length, v1::Job* job) const {
  const std::string& owner = rt.job.owner();
  v1::ShareInfo share = ShareStanding(policy_, owner_use_, owner, ledger_.Value(owner, clock_->Now()));
  if (rt.job.state() == v1::Job::PENDING && rt.queue_position > 0) {
    share.set_queue_position(rt.queue_position);
    share.set_queue_length(queue_length);
  }
  *job->mutable_share() = std::move(share);
}

}  // namespace trainyard
