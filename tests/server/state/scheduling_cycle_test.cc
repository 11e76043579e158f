// SchedulingCycle and its queue gates without a store: which jobs a pass places, which
// wait and why, read from the recorded Effects; a gate registered by a test shows how
// a new rule lands as one gate.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>

#include "tests/server/state/cycle_fixture.h"

namespace trainyard::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::StartsWith;
using Msg = v1::ControllerMessage;

// Holds the jobs named in `held`, in its own words; counts what it was asked.
class HoldNamedGate : public QueueGate {
 public:
  explicit HoldNamedGate(std::set<std::string> held) : held_(std::move(held)) {}
  const char* name() const override { return "hold-named"; }
  std::optional<std::string> Hold(const TrackedJob& rt, const QueuedJob& queued, absl::Time now) override {
    ++asked;
    if (!held_.count(rt.job.id())) return std::nullopt;
    return "held by the test gate";
  }
  int asked = 0;

 private:
  std::set<std::string> held_;
};

class SchedulingCycleTest : public CycleFixture {};

TEST_F(SchedulingCycleTest, AGatedJobWaitsApartWithItsReasonAndBlocksNobody) {
  Connect("w1", 2);
  auto gate = std::make_unique<HoldNamedGate>(std::set<std::string>{"job-1"});
  HoldNamedGate* g = gate.get();
  cycle_.AddGate(std::move(gate));
  // job-1 is first in FIFO order and at a higher priority, yet held: job-2 takes the
  // slots, and job-1 gets neither a reservation nor a place in the queue.
  Add("job-1", Spec(2, 0, /*priority=*/10));
  Add("job-2", Spec(2));
  Effects fx;
  cycle_.Run(&fx);
  EXPECT_EQ(g->asked, 2);
  EXPECT_THAT(States(fx, "job-1"), ElementsAre(v1::Job::PENDING));
  EXPECT_EQ(LastReason(fx, "job-1"), "held by the test gate");
  EXPECT_EQ(Job("job-1").pending_reason(), "held by the test gate");
  EXPECT_THAT(States(fx, "job-2"), ElementsAre(v1::Job::SCHEDULED));
  EXPECT_THAT(cycle_.queue_order(), IsEmpty());
  v1::Job view;
  jobs_.FillEstimate("job-1", &view);
  EXPECT_EQ(view.reserved_workers_size(), 0);
  EXPECT_FALSE(view.has_estimated_start_time());

  // Held again with the same words: no new write.
  Effects again;
  cycle_.Run(&again);
  EXPECT_THAT(States(again, "job-1"), IsEmpty());
}

TEST_F(SchedulingCycleTest, AWaitingJobIsQueuedWithAReservationWhenNoGateHoldsIt) {
  Connect("w1", 1);
  Add("job-1", Spec(1));
  Add("job-2", Spec(1));
  Effects fx;
  cycle_.Run(&fx);
  EXPECT_THAT(States(fx, "job-1"), ElementsAre(v1::Job::SCHEDULED));
  EXPECT_THAT(cycle_.queue_order(), ElementsAre("job-2"));
  EXPECT_EQ(jobs_.Find("job-2")->queue_position, 1);
  EXPECT_FALSE(Job("job-2").pending_reason().empty());
}

TEST_F(SchedulingCycleTest, TheFirstGateThatHoldsGivesTheReason) {
  Connect("w1", 1);
  Add("job-1", Spec(1, /*max_restarts=*/2));
  Effects placed;
  cycle_.Run(&placed);
  Effects failed;
  Ranks("job-1", v1::RankState::FAILED, &failed, "boom");
  // Also over a quota, but backing off is said first (the backoff gate is registered
  // first).
  SharingPolicy policy;
  policy.defaults.slots = 1;
  fair_share_.SetPolicy(policy);
  Add("job-2", Spec(1));
  Effects placed2;
  cycle_.Run(&placed2);
  ASSERT_THAT(States(placed2, "job-2"), ElementsAre(v1::Job::SCHEDULED));
  Effects fx;
  cycle_.Run(&fx);
  EXPECT_THAT(Job("job-1").pending_reason(), StartsWith("restarting: backing off until"));

  // Once the backoff is over, the quota gate holds it in its own words.
  clock_.Advance(absl::Seconds(11));
  Effects later;
  cycle_.Run(&later);
  EXPECT_THAT(LastReason(later, "job-1"), HasSubstr("quota: alice uses 1 of 1 slot; needs 1"));
  EXPECT_THAT(cycle_.queue_order(), IsEmpty());
}

TEST_F(SchedulingCycleTest, TheBackoffGateLetsTheRestartInOnceItEnds) {
  Connect("w1", 1);
  Add("job-1", Spec(1, /*max_restarts=*/1));
  Effects placed;
  cycle_.Run(&placed);
  Effects failed;
  Ranks("job-1", v1::RankState::FAILED, &failed, "boom");
  Effects waiting;
  clock_.Advance(absl::Seconds(9));
  cycle_.Run(&waiting);
  EXPECT_TRUE(Sent(waiting, "w1", Msg::kAssign).empty()) << "still backing off";
  clock_.Advance(absl::Seconds(1));
  Effects fx;
  cycle_.Run(&fx);
  EXPECT_THAT(States(fx, "job-1"), ElementsAre(v1::Job::SCHEDULED));
  ASSERT_EQ(Sent(fx, "w1", Msg::kAssign).size(), 1u);
  EXPECT_EQ(Sent(fx, "w1", Msg::kAssign)[0].assign().attempt(), 2);
}

TEST_F(SchedulingCycleTest, TwoJobsOfOneOwnerPastItsQuotaTogetherPlaceOnlyTheFirst) {
  Connect("w1", 4);
  SharingPolicy policy;
  policy.defaults.slots = 3;
  fair_share_.SetPolicy(policy);
  Add("job-1", Spec(2));
  Add("job-2", Spec(2));
  Add("job-3", Spec(2), "bob");
  Effects fx;
  cycle_.Run(&fx);
  EXPECT_THAT(States(fx, "job-1"), ElementsAre(v1::Job::SCHEDULED));
  EXPECT_THAT(LastReason(fx, "job-2"), HasSubstr("quota: alice"));
  EXPECT_THAT(States(fx, "job-3"), ElementsAre(v1::Job::SCHEDULED)) << "bob's job is not held by alice's quota";
  EXPECT_EQ(fair_share_.owner_use().at("alice").slots, 2);
  EXPECT_EQ(fair_share_.owner_use().at("bob").slots, 2);
}

TEST_F(SchedulingCycleTest, TheHeadPreemptsALowerPriorityJobWithoutACheckpoint) {
  Connect("w1", 1);
  Add("low", Spec(1));
  Effects placed;
  cycle_.Run(&placed);
  Effects running;
  Ranks("low", v1::RankState::RUNNING, &running);
  Add("high", Spec(1, 0, /*priority=*/10));
  Effects fx;
  cycle_.Run(&fx);
  // No checkpoint.dir: the victim stops now and goes back to PENDING once its rank ends.
  EXPECT_THAT(States(fx, "low"), ElementsAre(v1::Job::RESTARTING));
  EXPECT_EQ(LastReason(fx, "low"), "preempted by high (priority 10)");
  EXPECT_EQ(Sent(fx, "w1", Msg::kCancel).size(), 1u);
  Effects gone;
  Ranks("low", v1::RankState::KILLED, &gone);
  cycle_.Run(&gone);
  ASSERT_FALSE(States(gone, "low").empty());
  EXPECT_EQ(States(gone, "low").front(), v1::Job::PENDING);
  EXPECT_THAT(Job("low").pending_reason(), StartsWith("preempted by high (priority 10)"));
  EXPECT_THAT(States(gone, "high"), ElementsAre(v1::Job::SCHEDULED));
  EXPECT_EQ(Job("low").preemptions(), 1);
}

TEST_F(SchedulingCycleTest, ADrainAsksForACheckpointThenStopsAtTheGrace) {
  Connect("w1", 1);
  v1::JobSpec spec = Spec(1);
  spec.mutable_checkpoint()->set_dir("/ckpt/job-1");
  Add("job-1", spec);
  Effects placed;
  cycle_.Run(&placed);
  Effects running;
  Ranks("job-1", v1::RankState::RUNNING, &running);
  Effects fx;
  EXPECT_THAT(evictions_.Drain("w1", "kernel update", &fx), ElementsAre("job-1"));
  EXPECT_EQ(Sent(fx, "w1", Msg::kCheckpoint).size(), 1u);
  EXPECT_THAT(States(fx, "job-1"), IsEmpty()) << "it keeps running while it saves";
  clock_.Advance(absl::Seconds(121));
  Effects late;
  evictions_.EnforceEvictions(&late);
  EXPECT_THAT(States(late, "job-1"), ElementsAre(v1::Job::RESTARTING));
  EXPECT_EQ(LastReason(late, "job-1"), "drained from w1: kernel update");
  EXPECT_EQ(Sent(late, "w1", Msg::kCancel).size(), 1u);
}

}  // namespace
}  // namespace trainyard::testing
