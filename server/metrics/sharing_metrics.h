#pragma once

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>

#include <map>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace trainyard {

// The series of sharing the fleet: trainyard_preemptions_total{kind} (kind
// "preemption" | "drain": attempts evicted), trainyard_owner_slots_in_use{owner} and
// trainyard_owner_usage_slot_seconds{owner} (the decayed fair-share usage). Owners are
// the token file's, a small set; an owner keeps its series once it has used a slot.
// Thread-safe.
class SharingMetrics {
 public:
  explicit SharingMetrics(prometheus::Registry& registry);

  void Evicted(bool preemption);
  // Every owner's figures now; owners missing from `slots` are set to 0 slots.
  void SetOwners(const std::map<std::string, int>& slots, const std::map<std::string, double>& usage);

 private:
  struct Owner {
    prometheus::Gauge* slots = nullptr;
    prometheus::Gauge* usage = nullptr;
  };
  prometheus::Family<prometheus::Counter>& evictions_family_;
  prometheus::Counter& preemptions_;
  prometheus::Counter& drains_;
  prometheus::Family<prometheus::Gauge>& slots_family_;
  prometheus::Family<prometheus::Gauge>& usage_family_;
  absl::Mutex mu_;
  std::map<std::string, Owner> owners_ ABSL_GUARDED_BY(mu_);
};

}  // namespace trainyard
