#include "server/policy/sharing_policy.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/text.h"

namespace trainyard {

const OwnerPolicy* SharingPolicy::FindOwner(const std::string& owner) const {
  for (const auto& o : owners) {
    if (o.name == owner) return &o;
  }
  return nullptr;
}

const GroupPolicy* SharingPolicy::FindGroup(const std::string& group) const {
  if (group.empty()) return nullptr;
  for (const auto& g : groups) {
    if (g.name == group) return &g;
  }
  return nullptr;
}

std::string SharingPolicy::GroupOf(const std::string& owner) const {
  const OwnerPolicy* o = FindOwner(owner);
  return o == nullptr ? "" : o->group;
}

double SharingPolicy::WeightOf(const std::string& owner) const {
  const GroupPolicy* g = FindGroup(GroupOf(owner));
  return g == nullptr ? 1.0 : g->weight;
}

OwnerLimits SharingPolicy::LimitsOf(const std::string& owner) const {
  const OwnerPolicy* o = FindOwner(owner);
  return o == nullptr ? defaults : o->limits;
}

absl::Duration SharingPolicy::HalfLife() const { return absl::Seconds(half_life_hours * 3600.0); }

SlotUse GroupUse(const SharingPolicy& policy, const std::map<std::string, SlotUse>& in_use_by_owner,
                 const std::string& group) {
  SlotUse sum;
  if (group.empty()) return sum;
  for (const auto& o : policy.owners) {
    if (o.group != group) continue;
    auto it = in_use_by_owner.find(o.name);
    if (it == in_use_by_owner.end()) continue;
    sum.slots += it->second.slots;
    sum.gpus += it->second.gpus;
  }
  return sum;
}

namespace {

// "" when `use` + `need` stays within `limit` (0: none), else the reason; `who` is
// "alice" or "group research".
std::string CheckOne(const std::string& who, int use, int limit, int need, const char* unit) {
  if (limit <= 0 || need <= 0) return "";
  if (need > limit) return absl::StrCat("quota: ", who, " may use ", Counted(limit, unit), "; needs ", need);
  if (static_cast<int64_t>(use) + need > limit) {
    return absl::StrCat("quota: ", who, " uses ", use, " of ", Counted(limit, unit), "; needs ", need);
  }
  return "";
}

}  // namespace

std::string QuotaCheck(const SharingPolicy& policy, const std::map<std::string, SlotUse>& in_use_by_owner,
                       const std::string& owner, SlotUse needs) {
  SlotUse own;
  if (auto it = in_use_by_owner.find(owner); it != in_use_by_owner.end()) own = it->second;
  const OwnerLimits limits = policy.LimitsOf(owner);
  // The owner name comes from a token or a request: escaped, never echoed raw.
  const std::string who = Quote(owner);
  if (auto r = CheckOne(who, own.slots, limits.slots, needs.slots, "slot"); !r.empty()) return r;
  if (auto r = CheckOne(who, own.gpus, limits.gpus, needs.gpus, "GPU"); !r.empty()) return r;
  const GroupPolicy* group = policy.FindGroup(policy.GroupOf(owner));
  if (group == nullptr) return "";
  const SlotUse together = GroupUse(policy, in_use_by_owner, group->name);
  const std::string gwho = "group " + Quote(group->name);
  if (auto r = CheckOne(gwho, together.slots, group->limits.slots, needs.slots, "slot"); !r.empty()) return r;
  return CheckOne(gwho, together.gpus, group->limits.gpus, needs.gpus, "GPU");
}

namespace {

constexpr double kLn2 = 0.693147180559945309417232121458176568;

bool UsableHalfLife(absl::Duration h) { return h > absl::ZeroDuration() && h != absl::InfiniteDuration(); }

}  // namespace

UsageLedger::UsageLedger(absl::Duration half_life)
    : half_life_(UsableHalfLife(half_life) ? half_life : absl::Hours(24)) {}

double UsageLedger::Decay(absl::Duration elapsed) const {
  if (elapsed <= absl::ZeroDuration()) return 1.0;
  return std::exp2(-absl::FDivDuration(elapsed, half_life_));
}

void UsageLedger::SetHalfLife(absl::Duration half_life, absl::Time now) {
  if (!UsableHalfLife(half_life) || half_life == half_life_) return;
  for (auto& [owner, e] : entries_) {
    if (now <= e.as_of) continue;
    e.value *= Decay(now - e.as_of);
    e.as_of = now;
  }
  half_life_ = half_life;
}

void UsageLedger::Accrue(const std::string& owner, double slots, absl::Time from, absl::Time to) {
  if (!(slots > 0) || !std::isfinite(slots) || to <= from) return;
  if (from == absl::InfinitePast() || to == absl::InfiniteFuture()) return;
  auto [it, fresh] = entries_.try_emplace(owner);
  Entry& e = it->second;
  if (fresh) e.as_of = to;
  const absl::Time at = std::max(to, e.as_of);
  e.value *= Decay(at - e.as_of);
  // ∫_from^to s·2^(-(at-t)/h) dt = s·h/ln2 · 2^(-(at-to)/h) · (1 - 2^(-(to-from)/h));
  // 1 - 2^(-x) as -expm1(-x·ln2) keeps short intervals exact.
  const double h_seconds = absl::ToDoubleSeconds(half_life_);
  const double x = absl::FDivDuration(to - from, half_life_);
  e.value += slots * h_seconds / kLn2 * Decay(at - to) * -std::expm1(-x * kLn2);
  e.as_of = at;
}

double UsageLedger::Value(const std::string& owner, absl::Time now) const {
  auto it = entries_.find(owner);
  if (it == entries_.end()) return 0;
  return it->second.value * Decay(now - it->second.as_of);
}

void UsageLedger::Restore(const std::map<std::string, Entry>& entries) {
  entries_.clear();
  for (const auto& [owner, e] : entries) {
    if (!std::isfinite(e.value) || e.value < 0) continue;
    if (e.as_of == absl::InfinitePast() || e.as_of == absl::InfiniteFuture()) continue;
    entries_[owner] = e;
  }
}

double FairShare(const SharingPolicy& policy, const std::string& owner, double usage_slot_seconds) {
  const double weight = policy.WeightOf(owner);
  return usage_slot_seconds / (weight > 0 ? weight : 1.0);
}

void OrderQueueByFairShare(std::vector<QueuedJob>* queue,
                           const std::function<double(const QueuedJob&)>& fair_share_of) {
  struct Keyed {
    int priority;
    double share;
    size_t index;
  };
  std::vector<Keyed> keys;
  keys.reserve(queue->size());
  for (size_t i = 0; i < queue->size(); ++i) {
    const QueuedJob& q = (*queue)[i];
    double share = fair_share_of ? fair_share_of(q) : 0.0;
    if (std::isnan(share)) share = std::numeric_limits<double>::infinity();
    keys.push_back({q.spec != nullptr ? q.spec->job().priority() : 0, share, i});
  }
  std::sort(keys.begin(), keys.end(), [&](const Keyed& a, const Keyed& b) {
    if (a.priority != b.priority) return a.priority > b.priority;
    if (a.share != b.share) return a.share < b.share;
    const QueuedJob& qa = (*queue)[a.index];
    const QueuedJob& qb = (*queue)[b.index];
    if (qa.order != qb.order) return qa.order < qb.order;
    if (qa.id != qb.id) return qa.id < qb.id;
    return a.index < b.index;
  });
  std::vector<QueuedJob> sorted;
  sorted.reserve(queue->size());
  for (const Keyed& k : keys) sorted.push_back(std::move((*queue)[k.index]));
  *queue = std::move(sorted);
}

v1::ShareInfo ShareStanding(const SharingPolicy& policy, const std::map<std::string, SlotUse>& in_use_by_owner,
                            const std::string& owner, double usage_slot_seconds) {
  v1::ShareInfo info;
  info.set_owner(owner);
  SlotUse own;
  if (auto it = in_use_by_owner.find(owner); it != in_use_by_owner.end()) own = it->second;
  const OwnerLimits limits = policy.LimitsOf(owner);
  info.set_owner_slots_in_use(own.slots);
  info.set_owner_slot_limit(limits.slots);
  info.set_owner_gpus_in_use(own.gpus);
  info.set_owner_gpu_limit(limits.gpus);
  if (const GroupPolicy* group = policy.FindGroup(policy.GroupOf(owner))) {
    const SlotUse together = GroupUse(policy, in_use_by_owner, group->name);
    info.set_group(group->name);
    info.set_group_slots_in_use(together.slots);
    info.set_group_slot_limit(group->limits.slots);
    info.set_group_gpus_in_use(together.gpus);
    info.set_group_gpu_limit(group->limits.gpus);
  }
  info.set_weight(policy.WeightOf(owner));
  info.set_usage_slot_seconds(usage_slot_seconds);
  info.set_fair_share(FairShare(policy, owner, usage_slot_seconds));
  return info;
}

}  // namespace trainyard
