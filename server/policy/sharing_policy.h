// Sharing a fleet between owners (the controller's --policy-file): per-owner and
// per-group quotas on concurrently running slots and GPUs, the decayed usage that
// orders the queue among jobs of equal priority (fair share), and where an owner
// stands (v1::ShareInfo). Pure: no I/O, no locks, no clock (times come in as values).
//
// Thread contract: SharingPolicy and the free functions are thread-safe (plain values);
// a UsageLedger is used by one thread at a time (the caller's lock).
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "server/policy/gang_scheduler.h"
#include "trainyard/v1/job.pb.h"

namespace trainyard {

// Concurrently running slots and GPUs; 0: no limit.
struct OwnerLimits {
  int slots = 0;
  int gpus = 0;
};

struct GroupPolicy {
  std::string name;
  OwnerLimits limits;  // for all members together
  double weight = 1;   // > 0: fair share is usage / weight, so 2 is served as half the usage
};

struct OwnerPolicy {
  std::string name;
  std::string group;  // "" or the name of one of SharingPolicy::groups
  // The owner's own limits. A listed owner does not fall back to SharingPolicy::defaults:
  // a key absent from its [[owner]] entry is 0, no limit.
  OwnerLimits limits;
};

struct SharingPolicy {
  double half_life_hours = 24;  // usage decay; > 0
  OwnerLimits defaults;         // owners not listed in `owners`
  std::vector<GroupPolicy> groups;
  std::vector<OwnerPolicy> owners;

  // nullptr when not listed.
  const OwnerPolicy* FindOwner(const std::string& owner) const;
  const GroupPolicy* FindGroup(const std::string& group) const;
  // The owner's group, "" when it has none (or is not listed).
  std::string GroupOf(const std::string& owner) const;
  // Its group's weight, 1 without a group.
  double WeightOf(const std::string& owner) const;
  // Its own entry's limits, else `defaults`.
  OwnerLimits LimitsOf(const std::string& owner) const;
  // half_life_hours as a duration.
  absl::Duration HalfLife() const;
};

// Slots and GPUs one owner (or one job) holds or needs.
struct SlotUse {
  int slots = 0;
  int gpus = 0;
};

// What the members of `group` hold together (the sum over the owners the policy puts
// in it); zero for "".
SlotUse GroupUse(const SharingPolicy& policy, const std::map<std::string, SlotUse>& in_use_by_owner,
                 const std::string& group);

// Whether `owner` may start a job that `needs` while `in_use_by_owner` runs: "" when it
// fits, else the pending reason. The owner's limits are checked before its group's,
// slots before GPUs, and the first that is exceeded is named:
//   quota: alice uses 6 of 8 slots; needs 4
//   quota: group research uses 14 of 16 GPUs; needs 4
//   quota: alice may use 8 slots; needs 10        (the need alone is over the limit)
std::string QuotaCheck(const SharingPolicy& policy, const std::map<std::string, SlotUse>& in_use_by_owner,
                       const std::string& owner, SlotUse needs);

// Usage in slot-seconds per owner, each slot-second decayed exponentially with the
// half-life h: a value v at time t is worth v·2^(-(t'-t)/h) at t' > t. Accrue adds
// running slots over an interval exactly (the closed form for a constant slot count),
// so the value does not depend on how often it is called or how intervals are cut.
class UsageLedger {
 public:
  struct Entry {
    double value = 0;  // slot-seconds, decayed up to as_of
    absl::Time as_of = absl::UnixEpoch();
  };

  // A non-positive or infinite half-life is replaced by 24 h.
  explicit UsageLedger(absl::Duration half_life = absl::Hours(24));

  // The new half-life decays values from `now` on; what decayed before keeps the old
  // one (every entry is brought up to `now` first).
  void SetHalfLife(absl::Duration half_life, absl::Time now);
  absl::Duration half_life() const { return half_life_; }

  // `owner` ran `slots` over [from, to]: adds ∫ slots·2^(-(T-t)/h) dt over it, valued at
  // T = max(to, the entry's as_of), so intervals may come in any order (two jobs of one
  // owner over the same span). Nothing for slots <= 0 or to <= from.
  void Accrue(const std::string& owner, double slots, absl::Time from, absl::Time to);

  // The owner's usage at `now` (0 when unknown). A `now` before the entry's as_of (a
  // clock stepped back) reads the entry undecayed.
  double Value(const std::string& owner, absl::Time now) const;

  // For persistence: every owner's entry, and back. Restore replaces all entries;
  // negative or non-finite values are dropped.
  std::map<std::string, Entry> Snapshot() const { return entries_; }
  void Restore(const std::map<std::string, Entry>& entries);

 private:
  double Decay(absl::Duration elapsed) const;  // 2^(-elapsed/h); 1 for elapsed <= 0

  absl::Duration half_life_;
  std::map<std::string, Entry> entries_;
};

// usage / weight: lower is served first among equal priority.
double FairShare(const SharingPolicy& policy, const std::string& owner, double usage_slot_seconds);

// Sorts `queue` into scheduling order under fair share: higher spec.job.priority first,
// then lower fair share of the job's owner (`fair_share_of`, called once per job; NaN
// counts as +infinity), then lower `order` (FIFO), then id. Deterministic.
void OrderQueueByFairShare(std::vector<QueuedJob>* queue, const std::function<double(const QueuedJob&)>& fair_share_of);

// Where `owner` stands: its group, its and its group's slots and GPUs in use and
// limits, the weight, the decayed usage and the fair share. queue_position and
// queue_length are left 0 (the caller knows the queue).
v1::ShareInfo ShareStanding(const SharingPolicy& policy, const std::map<std::string, SlotUse>& in_use_by_owner,
                            const std::string& owner, double usage_slot_seconds);

}  // namespace trainyard
