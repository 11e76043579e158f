// Sharing a fleet with plain values: quota reasons (owner and group, slots and GPUs),
// the decayed usage ledger against hand-computed values, fair-share queue order and an
// owner's standing.
#include "server/policy/sharing_policy.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

namespace trainyard {
namespace {

// research (16 slots, 8 GPUs, weight 2): alice (8 slots, 4 GPUs) and bob (own limits
// none). Unlisted owners: 2 slots each.
SharingPolicy Policy() {
  SharingPolicy p;
  p.defaults = {2, 0};
  p.groups = {{"research", {16, 8}, 2.0}, {"ops", {0, 0}, 0.5}};
  p.owners = {{"alice", "research", {8, 4}}, {"bob", "research", {}}, {"olga", "ops", {}}, {"solo", "", {3, 1}}};
  return p;
}

TEST(SharingPolicyTest, LookupsUseTheOwnersEntryElseDefaults) {
  const SharingPolicy p = Policy();
  EXPECT_EQ(p.GroupOf("alice"), "research");
  EXPECT_EQ(p.GroupOf("solo"), "");
  EXPECT_EQ(p.GroupOf("nobody"), "");
  EXPECT_EQ(p.WeightOf("alice"), 2.0);
  EXPECT_EQ(p.WeightOf("olga"), 0.5);
  EXPECT_EQ(p.WeightOf("solo"), 1.0);
  EXPECT_EQ(p.WeightOf("nobody"), 1.0);
  EXPECT_EQ(p.LimitsOf("alice").slots, 8);
  EXPECT_EQ(p.LimitsOf("alice").gpus, 4);
  EXPECT_EQ(p.LimitsOf("bob").slots, 0) << "listed: no fallback to defaults";
  EXPECT_EQ(p.LimitsOf("nobody").slots, 2);
  EXPECT_EQ(p.HalfLife(), absl::Hours(24));
}

TEST(SharingPolicyTest, QuotaNamesTheOwnersSlotsInUseAndTheNeed) {
  const SharingPolicy p = Policy();
  EXPECT_EQ(QuotaCheck(p, {{"alice", {6, 0}}}, "alice", {4, 0}), "quota: alice uses 6 of 8 slots; needs 4");
  EXPECT_EQ(QuotaCheck(p, {{"alice", {4, 0}}}, "alice", {4, 0}), "") << "exactly at the limit fits";
  EXPECT_EQ(QuotaCheck(p, {}, "alice", {10, 0}), "quota: alice may use 8 slots; needs 10");
  EXPECT_EQ(QuotaCheck(p, {{"nobody", {1, 0}}}, "nobody", {2, 0}), "quota: nobody uses 1 of 2 slots; needs 2");
  EXPECT_EQ(QuotaCheck(p, {{"nobody", {1, 0}}}, "nobody", {1, 0}), "");
}

TEST(SharingPolicyTest, QuotaNamesGpus) {
  const SharingPolicy p = Policy();
  EXPECT_EQ(QuotaCheck(p, {{"alice", {2, 2}}}, "alice", {3, 3}), "quota: alice uses 2 of 4 GPUs; needs 3");
  EXPECT_EQ(QuotaCheck(p, {}, "alice", {5, 5}), "quota: alice may use 4 GPUs; needs 5");
  EXPECT_EQ(QuotaCheck(p, {{"solo", {0, 1}}}, "solo", {1, 1}), "quota: solo uses 1 of 1 GPU; needs 1");
  EXPECT_EQ(QuotaCheck(p, {{"solo", {0, 1}}}, "solo", {1, 0}), "") << "a CPU job needs no GPU";
}

TEST(SharingPolicyTest, TheGroupsUseIsTheSumOverItsMembers) {
  const SharingPolicy p = Policy();
  // alice 4 + bob 10 = 14 of research's 16; alice's own 4 + 4 = 8 fits.
  const std::map<std::string, SlotUse> use = {{"alice", {4, 0}}, {"bob", {10, 6}}, {"olga", {50, 50}}};
  EXPECT_EQ(GroupUse(p, use, "research").slots, 14);
  EXPECT_EQ(GroupUse(p, use, "research").gpus, 6);
  EXPECT_EQ(GroupUse(p, use, "").slots, 0);
  EXPECT_EQ(QuotaCheck(p, use, "alice", {4, 0}), "quota: group research uses 14 of 16 slots; needs 4");
  EXPECT_EQ(QuotaCheck(p, use, "bob", {2, 0}), "");
  EXPECT_EQ(QuotaCheck(p, use, "bob", {2, 3}), "quota: group research uses 6 of 8 GPUs; needs 3");
  EXPECT_EQ(QuotaCheck(p, {}, "bob", {20, 0}), "quota: group research may use 16 slots; needs 20");
  EXPECT_EQ(QuotaCheck(p, use, "olga", {100, 100}), "") << "ops has no limits";
}

TEST(SharingPolicyTest, OwnerIsCheckedBeforeGroupAndSlotsBeforeGpus) {
  const SharingPolicy p = Policy();
  // Everything is over: alice's slots are named first.
  const std::map<std::string, SlotUse> full = {{"alice", {8, 4}}, {"bob", {8, 4}}};
  EXPECT_EQ(QuotaCheck(p, full, "alice", {1, 1}), "quota: alice uses 8 of 8 slots; needs 1");
  // Alice's slots fit, her GPUs do not, and the group's slots do not either.
  const std::map<std::string, SlotUse> gpus = {{"alice", {0, 4}}, {"bob", {16, 0}}};
  EXPECT_EQ(QuotaCheck(p, gpus, "alice", {1, 1}), "quota: alice uses 4 of 4 GPUs; needs 1");
  // Alice fits; the group's slots and GPUs are both over: slots first.
  const std::map<std::string, SlotUse> group = {{"bob", {16, 8}}};
  EXPECT_EQ(QuotaCheck(p, group, "alice", {1, 1}), "quota: group research uses 16 of 16 slots; needs 1");
}

TEST(SharingPolicyTest, NoLimitMeansAnything) {
  SharingPolicy empty;
  EXPECT_EQ(QuotaCheck(empty, {{"x", {1000, 1000}}}, "x", {1000000, 1000000}), "");
}

TEST(SharingPolicyTest, AHostileOwnerNameIsEscapedInTheReason) {
  const SharingPolicy p = Policy();
  const std::string reason = QuotaCheck(p, {}, "ev\nil", {3, 0});
  EXPECT_EQ(reason, "quota: ev\\x0ail may use 2 slots; needs 3");
}

// Independently of the ledger: a constant rate r over [a, b], valued at time t >= b
// with half-life h (all in seconds), is r·h/ln 2·(0.5^((t-b)/h) - 0.5^((t-a)/h)).
double Integral(double rate, double a, double b, double t, double h) {
  return rate * h / std::log(2.0) * (std::pow(0.5, (t - b) / h) - std::pow(0.5, (t - a) / h));
}

const absl::Time kLedgerT0 = absl::FromUnixSeconds(1700000000);
constexpr double kDay = 86400;

TEST(UsageLedgerTest, FourSlotsForAnHourThenADayOfNothing) {
  UsageLedger ledger(absl::Hours(24));
  ledger.Accrue("alice", 4, kLedgerT0, kLedgerT0 + absl::Hours(1));
  const double at_end = Integral(4, 0, 3600, 3600, kDay);
  // Without decay it would be 4·3600 = 14400; an hour at a 24 h half-life loses ~1 %.
  EXPECT_NEAR(at_end, 14400 * 0.9857, 0.5);
  EXPECT_NEAR(ledger.Value("alice", kLedgerT0 + absl::Hours(1)), at_end, 1e-9 * at_end);
  // A midpoint sum of the decayed slot-seconds agrees.
  double sum = 0;
  const int steps = 3600;
  for (int i = 0; i < steps; ++i) sum += 4 * std::pow(0.5, (25 * 3600.0 - (i + 0.5)) / kDay);
  EXPECT_NEAR(ledger.Value("alice", kLedgerT0 + absl::Hours(25)), sum, 1e-6 * sum);
  EXPECT_NEAR(ledger.Value("alice", kLedgerT0 + absl::Hours(25)), at_end / 2, 1e-9 * at_end);
}

TEST(UsageLedgerTest, OneHalfLifeHalvesExactly) {
  UsageLedger ledger(absl::Hours(6));
  ledger.Accrue("bob", 2, kLedgerT0, kLedgerT0 + absl::Minutes(10));
  const double v = ledger.Value("bob", kLedgerT0 + absl::Minutes(10));
  EXPECT_DOUBLE_EQ(ledger.Value("bob", kLedgerT0 + absl::Minutes(10) + absl::Hours(6)), v / 2);
  EXPECT_DOUBLE_EQ(ledger.Value("bob", kLedgerT0 + absl::Minutes(10) + absl::Hours(18)), v / 8);
  EXPECT_EQ(ledger.Value("nobody", kLedgerT0), 0);
  EXPECT_EQ(ledger.Value("bob", kLedgerT0 - absl::Hours(1)), v) << "a clock stepped back reads undecayed";
}

TEST(UsageLedgerTest, HowIntervalsAreCutAndOrderedDoesNotMatter) {
  UsageLedger whole, pieces, backwards, overlap;
  whole.Accrue("a", 3, kLedgerT0, kLedgerT0 + absl::Hours(2));
  for (int m = 0; m < 120; m += 7) {
    pieces.Accrue("a", 3, kLedgerT0 + absl::Minutes(m), kLedgerT0 + absl::Minutes(std::min(m + 7, 120)));
  }
  backwards.Accrue("a", 3, kLedgerT0 + absl::Hours(1), kLedgerT0 + absl::Hours(2));
  backwards.Accrue("a", 3, kLedgerT0, kLedgerT0 + absl::Hours(1));
  // Two jobs of one owner over the same span: 1 + 2 slots.
  overlap.Accrue("a", 1, kLedgerT0, kLedgerT0 + absl::Hours(2));
  overlap.Accrue("a", 2, kLedgerT0, kLedgerT0 + absl::Hours(2));
  const absl::Time later = kLedgerT0 + absl::Hours(30);
  const double want = Integral(3, 0, 7200, 30 * 3600.0, kDay);
  for (const UsageLedger* l : {&whole, &pieces, &backwards, &overlap}) {
    EXPECT_NEAR(l->Value("a", later), want, 1e-9 * want);
  }
  // Nothing for empty or reversed intervals and non-positive slots.
  UsageLedger none;
  none.Accrue("a", 3, kLedgerT0, kLedgerT0);
  none.Accrue("a", 3, kLedgerT0 + absl::Hours(1), kLedgerT0);
  none.Accrue("a", 0, kLedgerT0, kLedgerT0 + absl::Hours(1));
  none.Accrue("a", -1, kLedgerT0, kLedgerT0 + absl::Hours(1));
  EXPECT_EQ(none.Value("a", kLedgerT0 + absl::Hours(2)), 0);
}

TEST(UsageLedgerTest, AHalfLifeChangeAppliesFromThenOn) {
  UsageLedger ledger(absl::Hours(24));
  ledger.Accrue("a", 1, kLedgerT0, kLedgerT0 + absl::Hours(1));
  const double v = ledger.Value("a", kLedgerT0 + absl::Hours(1));
  ledger.SetHalfLife(absl::Hours(12), kLedgerT0 + absl::Hours(25));  // a day at 24 h: v/2
  EXPECT_EQ(ledger.half_life(), absl::Hours(12));
  EXPECT_NEAR(ledger.Value("a", kLedgerT0 + absl::Hours(25)), v / 2, 1e-12 * v);
  EXPECT_NEAR(ledger.Value("a", kLedgerT0 + absl::Hours(37)), v / 4, 1e-12 * v);  // 12 h at 12 h
  ledger.SetHalfLife(absl::ZeroDuration(), kLedgerT0 + absl::Hours(37));
  EXPECT_EQ(ledger.half_life(), absl::Hours(12)) << "a non-positive half-life is ignored";
  EXPECT_EQ(UsageLedger(-absl::Hours(1)).half_life(), absl::Hours(24));
}

TEST(UsageLedgerTest, SnapshotAndRestoreKeepValuesAndDropGarbage) {
  UsageLedger ledger(absl::Hours(24));
  ledger.Accrue("a", 4, kLedgerT0, kLedgerT0 + absl::Hours(1));
  ledger.Accrue("b", 1, kLedgerT0 + absl::Hours(2), kLedgerT0 + absl::Hours(3));
  std::map<std::string, UsageLedger::Entry> snap = ledger.Snapshot();
  ASSERT_EQ(snap.size(), 2u);
  EXPECT_EQ(snap["a"].as_of, kLedgerT0 + absl::Hours(1));
  EXPECT_EQ(snap["b"].as_of, kLedgerT0 + absl::Hours(3));
  snap["bad"] = {-5, kLedgerT0};
  snap["nan"] = {std::nan(""), kLedgerT0};
  snap["inf"] = {1, absl::InfiniteFuture()};
  UsageLedger restored(absl::Hours(24));
  restored.Accrue("stale", 1, kLedgerT0, kLedgerT0 + absl::Hours(1));
  restored.Restore(snap);
  const absl::Time later = kLedgerT0 + absl::Hours(50);
  EXPECT_EQ(restored.Value("a", later), ledger.Value("a", later));
  EXPECT_EQ(restored.Value("b", later), ledger.Value("b", later));
  EXPECT_EQ(restored.Snapshot().size(), 2u) << "stale, bad, nan and inf are gone";
  restored.Accrue("a", 4, kLedgerT0 + absl::Hours(1), kLedgerT0 + absl::Hours(2));
  EXPECT_NEAR(restored.Value("a", later), Integral(4, 0, 7200, 50 * 3600.0, kDay), 1e-9 * 28800);
}

v1::JobSpec PrioritySpec(int priority) {
  v1::JobSpec spec;
  spec.mutable_job()->set_priority(priority);
  return spec;
}

QueuedJob Q(const std::string& id, const v1::JobSpec* spec, int64_t order) {
  QueuedJob q;
  q.id = id;
  q.spec = spec;
  q.order = order;
  return q;
}

std::vector<std::string> Ids(const std::vector<QueuedJob>& queue) {
  std::vector<std::string> ids;
  for (const auto& q : queue) ids.push_back(q.id);
  return ids;
}

TEST(SharingPolicyOrderTest, PriorityThenFairShareThenFifoWithDecayAndWeights) {
  SharingPolicy p;
  p.groups = {{"heavy", {}, 4.0}, {"light", {}, 0.5}};
  p.owners = {{"old", "", {}}, {"recent", "", {}}, {"weighted", "heavy", {}}, {"small", "light", {}}};
  UsageLedger ledger(absl::Hours(24));
  const absl::Time now = kLedgerT0 + absl::Hours(240);
  // old: 64 slots for an hour ten half-lives ago, about 64/1024 slot-hours left.
  ledger.Accrue("old", 64, kLedgerT0, kLedgerT0 + absl::Hours(1));
  // recent: 1 slot for the last hour, about 1 slot-hour.
  ledger.Accrue("recent", 1, now - absl::Hours(1), now);
  // weighted: 3 slots for the last hour, weight 4: about 0.75.
  ledger.Accrue("weighted", 3, now - absl::Hours(1), now);
  // small: 0.4 slot-hours' worth at weight 0.5: about 0.8.
  ledger.Accrue("small", 2, now - absl::Minutes(12), now);
  // fresh: never ran: 0.
  std::map<std::string, std::string> owner = {{"r1", "recent"}, {"o1", "old"}, {"w1", "weighted"}, {"s1", "small"},
                                              {"f1", "fresh"},  {"o2", "old"}, {"hi", "recent"},   {"f2", "fresh"}};
  v1::JobSpec p0 = PrioritySpec(0), p5 = PrioritySpec(5);
  std::vector<QueuedJob> queue = {Q("r1", &p0, 1), Q("o1", &p0, 9), Q("w1", &p0, 3),  Q("s1", &p0, 4),
                                  Q("f1", &p0, 8), Q("o2", &p0, 2), Q("hi", &p5, 99), Q("f2", &p0, 8)};
  int calls = 0;
  OrderQueueByFairShare(&queue, [&](const QueuedJob& q) {
    ++calls;
    const std::string& o = owner.at(q.id);
    return FairShare(p, o, ledger.Value(o, now));
  });
  EXPECT_EQ(calls, 8) << "once per job";
  // hi: priority. fresh (0; f1 and f2 tie on order too: id), old (~0.06), weighted
  // (~0.75), small (~0.8), recent (~1).
  EXPECT_EQ(Ids(queue), (std::vector<std::string>{"hi", "f1", "f2", "o2", "o1", "w1", "s1", "r1"}));
}

TEST(SharingPolicyOrderTest, NanSharesGoLastAndEqualSharesKeepFifo) {
  v1::JobSpec p0 = PrioritySpec(0);
  std::vector<QueuedJob> queue = {Q("nan", &p0, 0), Q("b", &p0, 2), Q("a", &p0, 1)};
  OrderQueueByFairShare(&queue, [](const QueuedJob& q) { return q.id == "nan" ? std::nan("") : 5.0; });
  EXPECT_EQ(Ids(queue), (std::vector<std::string>{"a", "b", "nan"}));
}

TEST(SharingPolicyTest, ShareStandingFillsOwnerAndGroup) {
  const SharingPolicy p = Policy();
  const std::map<std::string, SlotUse> use = {{"alice", {4, 2}}, {"bob", {10, 6}}};
  v1::ShareInfo s = ShareStanding(p, use, "alice", 7200);
  EXPECT_EQ(s.owner(), "alice");
  EXPECT_EQ(s.group(), "research");
  EXPECT_EQ(s.owner_slots_in_use(), 4);
  EXPECT_EQ(s.owner_slot_limit(), 8);
  EXPECT_EQ(s.owner_gpus_in_use(), 2);
  EXPECT_EQ(s.owner_gpu_limit(), 4);
  EXPECT_EQ(s.group_slots_in_use(), 14);
  EXPECT_EQ(s.group_slot_limit(), 16);
  EXPECT_EQ(s.group_gpus_in_use(), 8);
  EXPECT_EQ(s.group_gpu_limit(), 8);
  EXPECT_EQ(s.weight(), 2.0);
  EXPECT_EQ(s.usage_slot_seconds(), 7200);
  EXPECT_EQ(s.fair_share(), 3600);
  EXPECT_EQ(s.queue_position(), 0);

  v1::ShareInfo n = ShareStanding(p, use, "nobody", 10);
  EXPECT_EQ(n.group(), "");
  EXPECT_EQ(n.owner_slots_in_use(), 0);
  EXPECT_EQ(n.owner_slot_limit(), 2);
  EXPECT_EQ(n.group_slot_limit(), 0);
  EXPECT_EQ(n.weight(), 1.0);
  EXPECT_EQ(n.fair_share(), 10);
}

}  // namespace
}  // namespace trainyard
