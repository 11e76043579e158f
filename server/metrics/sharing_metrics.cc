#include "server/metrics/sharing_metrics.h"

#include <set>

namespace trainyard {
namespace {

prometheus::Family<prometheus::Counter>& Evictions(prometheus::Registry& registry) {
  return prometheus::BuildCounter()
      .Name("trainyard_preemptions_total")
      .Help("Attempts stopped to make room (kind=preemption: for a higher-priority job; kind=drain: by "
            "DrainWorker), after their checkpoint or at the grace deadline")
      .Register(registry);
}

}  // namespace

SharingMetrics::SharingMetrics(prometheus::Registry& registry)
    : evictions_family_(Evictions(registry)),
      preemptions_(evictions_family_.Add({{"kind", "preemption"}})),
      drains_(evictions_family_.Add({{"kind", "drain"}})),
      slots_family_(prometheus::BuildGauge()
                        .Name("trainyard_owner_slots_in_use")
                        .Help("Slots held by the owner's running ranks")
                        .Register(registry)),
      usage_family_(prometheus::BuildGauge()
                        .Name("trainyard_owner_usage_slot_seconds")
                        .Help("The owner's fair-share usage: slot-seconds, each decayed by the policy's half-life")
                        .Register(registry)) {}

void SharingMetrics::Evicted(bool preemption) { (preemption ? preemptions_ : drains_).Increment(); }

void SharingMetrics::SetOwners(const std::map<std::string, int>& slots, const std::map<std::string, double>& usage) {
  absl::MutexLock lock(&mu_);
  std::set<std::string> seen;
  for (const auto& [owner, n] : slots) seen.insert(owner);
  for (const auto& [owner, u] : usage) seen.insert(owner);
  for (const std::string& owner : seen) {
    Owner& o = owners_[owner];
    if (o.slots == nullptr) {
      o.slots = &slots_family_.Add({{"owner", owner}});
      o.usage = &usage_family_.Add({{"owner", owner}});
    }
  }
  for (auto& [owner, o] : owners_) {
    auto s = slots.find(owner);
    o.slots->Set(s == slots.end() ? 0 : s->second);
    auto u = usage.find(owner);
    o.usage->Set(u == usage.end() ? 0 : u->second);
  }
}

}  // namespace trainyard
