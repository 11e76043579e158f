// Quotas and fair share through JobManager (fake clock, fake worker channels, a real
// SqliteJobStore): a job over its owner's or group's quota waits with the quota's
// reason and holds nobody back, two jobs placed in one pass cannot pass a quota
// together, equal priorities go by decayed usage / weight, and the usage survives a
// controller restart.
#include <cmath>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "server/policy/policy_file.h"
#include "tests/server/state/manager_fixture.h"

namespace trainyard::testing {
namespace {

using ::testing::HasSubstr;

class JobQuotaTest : public ManagerFixture {
 protected:
  void Policy(const std::string& toml) {
    auto policy = ParsePolicyFile(toml, "policy.toml");
    ASSERT_TRUE(policy.ok()) << policy.status();
    policy_ = *policy;  // a restart keeps it, as the controller re-reads its file
    manager_->SetPolicy(*policy);
  }
};

TEST_F(JobQuotaTest, AJobOverItsQuotaWaitsWithTheReasonAndHoldsNobodyBack) {
  Policy(R"(
[[group]]
name = "research"
slots = 3

[[owner]]
name = "alice"
group = "research"
slots = 2

[[owner]]
name = "carol"
group = "research"
)");
  Conn w1 = Connect("w1", 8);
  const std::string a1 = Submit(Spec(2), "alice");
  ASSERT_EQ(Job(a1).state(), v1::Job::SCHEDULED);
  const std::string a2 = Submit(Spec(2), "alice");
  EXPECT_EQ(Job(a2).state(), v1::Job::PENDING);
  EXPECT_EQ(Job(a2).pending_reason(), "quota: alice uses 2 of 2 slots; needs 2");
  const std::string big = Submit(Spec(3), "alice");
  EXPECT_EQ(Job(big).pending_reason(), "quota: alice may use 2 slots; needs 3");
  // The group: alice's 2 and carol's 2 would pass research's 3.
  const std::string c1 = Submit(Spec(2), "carol");
  EXPECT_EQ(Job(c1).pending_reason(), "quota: group research uses 2 of 3 slots; needs 2");
  // Bob has no limit and is not held back by the jobs over quota ahead of him.
  const std::string b1 = Submit(Spec(4), "bob");
  EXPECT_EQ(Job(b1).state(), v1::Job::SCHEDULED);
  const v1::ShareInfo share = Job(a2).share();
  EXPECT_EQ(share.owner(), "alice");
  EXPECT_EQ(share.group(), "research");
  EXPECT_EQ(share.owner_slots_in_use(), 2);
  EXPECT_EQ(share.owner_slot_limit(), 2);
  EXPECT_EQ(share.group_slots_in_use(), 2);
  EXPECT_EQ(share.group_slot_limit(), 3);
  EXPECT_EQ(share.queue_position(), 0) << "held by its quota, it is not in the queue";

  // Alice's first job ends: her second starts (carol's still would pass the group's).
  Report(w1, a1, 1, {0, 1}, v1::RankState::EXITED);
  EXPECT_EQ(Job(a2).state(), v1::Job::SCHEDULED);
  EXPECT_EQ(Job(c1).state(), v1::Job::PENDING);
}

TEST_F(JobQuotaTest, TwoJobsPlacedInOnePassCannotPassAQuotaTogether) {
  Policy("[[owner]]\nname = \"alice\"\nslots = 1\n");
  Conn w1 = Connect("w1", 1);
  const std::string blocker = Submit(Spec(1), "bob");
  const std::string a1 = Submit(Spec(1), "alice");
  const std::string a2 = Submit(Spec(1), "alice");
  Conn w2 = Connect("w2", 2);  // two free slots at once: one pass places what fits
  EXPECT_EQ(Job(a1).state(), v1::Job::SCHEDULED);
  EXPECT_EQ(Job(a2).state(), v1::Job::PENDING);
  EXPECT_EQ(Job(a2).pending_reason(), "quota: alice uses 1 of 1 slot; needs 1");
  (void)blocker;
  (void)w1;
  (void)w2;
}

TEST_F(JobQuotaTest, EqualPrioritiesGoByDecayedUsageOverWeightAndUsageSurvivesARestart) {
  Policy(R"(
half_life_hours = 1

[[group]]
name = "heavy"
weight = 4

[[owner]]
name = "dave"
group = "heavy"
)");
  Conn w1 = Connect("w1", 2);
  // Alice runs 2 slots for an hour; dave (weight 4) 2 slots for an hour after her.
  const std::string a = Submit(Spec(2), "alice");
  Pass(absl::Seconds(1), {w1});
  Pass(absl::Hours(1), {w1});
  Report(w1, a, 1, {0, 1}, v1::RankState::EXITED);
  const std::string d = Submit(Spec(2), "dave");
  Pass(absl::Hours(1), {w1});
  Report(w1, d, 1, {0, 1}, v1::RankState::EXITED);
  // 2 slots over an hour, valued at its end: 2·h/ln2·(1 − 2^-1) slot-seconds.
  const double h = 3600;
  const double hour = 2 * h / std::log(2.0) * 0.5;
  Pass(absl::Seconds(1), {w1});
  const double alice_now = hour * std::pow(2.0, -3601.0 / h);  // valued when her job ended
  const double dave_now = hour * std::pow(2.0, -1.0 / h);

  // The fleet busy, alice then dave then bob queue at equal priority.
  const std::string busy = Submit(Spec(2), "erin");
  const std::string qa = Submit(Spec(2), "alice");
  const std::string qd = Submit(Spec(2), "dave");
  const std::string qb = Submit(Spec(2), "bob");
  v1::ShareInfo sa = Job(qa).share(), sd = Job(qd).share(), sb = Job(qb).share();
  EXPECT_NEAR(sa.usage_slot_seconds(), alice_now, 1e-6 * alice_now);
  EXPECT_NEAR(sd.usage_slot_seconds(), dave_now, 1e-6 * dave_now);
  EXPECT_DOUBLE_EQ(sd.weight(), 4);
  EXPECT_NEAR(sd.fair_share(), dave_now / 4, 1e-6 * dave_now);
  EXPECT_EQ(sb.usage_slot_seconds(), 0);
  // bob's 0 < dave's usage / 4 < alice's usage / 1.
  ASSERT_LT(sd.fair_share(), sa.fair_share());
  EXPECT_EQ(sb.queue_position(), 1);
  EXPECT_EQ(sd.queue_position(), 2);
  EXPECT_EQ(sa.queue_position(), 3);
  EXPECT_EQ(sa.queue_length(), 3);

  // The owner gauges, as Prometheus scrapes them after a tick.
  Pass(absl::Seconds(0), {w1});
  std::map<std::string, double> slots, usage;
  for (const auto& f : metrics_.registry()->Collect()) {
    for (const auto& m : f.metric) {
      if (m.label.empty() || m.label[0].name != "owner") continue;
      if (f.name == "trainyard_owner_slots_in_use") slots[m.label[0].value] = m.gauge.value;
      if (f.name == "trainyard_owner_usage_slot_seconds") usage[m.label[0].value] = m.gauge.value;
    }
  }
  EXPECT_EQ(slots.at("erin"), 2);
  EXPECT_EQ(slots.at("alice"), 0);
  EXPECT_NEAR(usage["alice"], alice_now, 1e-6 * alice_now);
  EXPECT_NEAR(usage["dave"], dave_now, 1e-6 * dave_now);

  // Usage is stored by Tick and read back after a restart, decayed from when it was saved.
  Pass(absl::Seconds(31), {w1});
  const double before = Job(qa).share().usage_slot_seconds();
  Restart();
  EXPECT_NEAR(Job(qa).share().usage_slot_seconds(), before, 1e-9 * before);
  EXPECT_EQ(Job(qb).share().queue_position(), 1);
  (void)busy;
}

}  // namespace
}  // namespace trainyard::testing
