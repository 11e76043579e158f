// JobStateMachine on its own, without a store: transitions, the worker messages they
// send after the writes that name them, and the ended-job listener, read from the
// recorded Effects.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/server/state/cycle_fixture.h"

namespace trainyard::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using Msg = v1::ControllerMessage;

class JobStateMachineTest : public CycleFixture {
 protected:
  JobStateMachineTest() {
    jobs_.AddEndedListener([this](const TrackedJob& rt, Effects* fx) {
      ended_.push_back(rt.job.id() + " " + v1::Job::State_Name(rt.job.state()));
      // What a listener records follows the transition in the same Effects.
      fx->AppendEvent(rt.job.id(), ControllerLog("info", "listener heard", rt.job.attempt(), clock_.Now()));
    });
  }
  std::vector<std::string> ended_;
};

TEST_F(JobStateMachineTest, PlacedRunsAndSucceedsTellingTheListenerOnce) {
  Connect("w1", 2);
  Add("job-1", Spec(2));
  Effects placed;
  cycle_.Run(&placed);
  EXPECT_THAT(States(placed, "job-1"), ElementsAre(v1::Job::SCHEDULED));
  ASSERT_EQ(Sent(placed, "w1", Msg::kAssign).size(), 1u);
  EXPECT_EQ(Sent(placed, "w1", Msg::kAssign)[0].assign().attempt(), 1);
  EXPECT_EQ(Job("job-1").placement().ranks_size(), 2);

  Effects running;
  Ranks("job-1", v1::RankState::RUNNING, &running);
  EXPECT_THAT(States(running, "job-1"), ElementsAre(v1::Job::RUNNING));
  EXPECT_THAT(ended_, IsEmpty());

  Effects done;
  Ranks("job-1", v1::RankState::EXITED, &done);
  EXPECT_THAT(States(done, "job-1"), ElementsAre(v1::Job::SUCCEEDED));
  EXPECT_THAT(ended_, ElementsAre("job-1 SUCCEEDED"));
  EXPECT_THAT(done.settled(), ElementsAre("job-1"));
  // The listener's event comes after the terminal job_state event.
  ASSERT_FALSE(done.writes().empty());
  const auto& last = done.writes().back();
  ASSERT_FALSE(last.events.empty());
  EXPECT_EQ(last.events.back().log().message(), "listener heard");
  EXPECT_TRUE(jobs_.Closed("job-1"));
  EXPECT_EQ(registry_.Count().free, 2) << "both slots released";
}

TEST_F(JobStateMachineTest, CancelOfAPlacedJobSendsCancelAfterTheWriteAndEndsIt) {
  Connect("w1", 1);
  Add("job-1", Spec(1));
  Effects placed;
  cycle_.Run(&placed);
  Effects fx;
  ASSERT_TRUE(jobs_.Cancel("job-1", "not needed", &fx).ok());
  EXPECT_THAT(States(fx, "job-1"), ElementsAre(v1::Job::CANCELLED));
  EXPECT_EQ(LastReason(fx, "job-1"), "cancelled: not needed");
  ASSERT_EQ(Sent(fx, "w1", Msg::kCancel).size(), 1u);
  EXPECT_THAT(ended_, ElementsAre("job-1 CANCELLED"));
  EXPECT_FALSE(jobs_.Closed("job-1")) << "its rank has not ended yet";
  EXPECT_THAT(fx.settled(), IsEmpty());

  Effects again;
  absl::Status s = jobs_.Cancel("job-1", "", &again);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_TRUE(again.empty());
  EXPECT_EQ(jobs_.Cancel("job-9", "", &again).code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(ended_, ElementsAre("job-1 CANCELLED")) << "told once";
}

TEST_F(JobStateMachineTest, RankFailureRestartsWithBackoffWithoutEnding) {
  Connect("w1", 1);
  Add("job-1", Spec(1, /*max_restarts=*/1));
  Effects placed;
  cycle_.Run(&placed);
  Effects failed;
  Ranks("job-1", v1::RankState::FAILED, &failed, "boom");
  EXPECT_THAT(States(failed, "job-1"), ElementsAre(v1::Job::RESTARTING, v1::Job::PENDING));
  EXPECT_THAT(LastReason(failed, "job-1"), HasSubstr("restarting: backing off until"));
  EXPECT_THAT(Job("job-1").failure_causes(), ElementsAre(HasSubstr("rank 0 on worker w1 failed: boom")));
  EXPECT_THAT(ended_, IsEmpty());
  // Out of restarts: the next failure ends it, and the listener hears.
  clock_.Advance(absl::Seconds(11));
  Effects again;
  cycle_.Run(&again);
  EXPECT_THAT(States(again, "job-1"), ElementsAre(v1::Job::SCHEDULED));
  Effects last;
  Ranks("job-1", v1::RankState::FAILED, &last, "boom");
  EXPECT_THAT(States(last, "job-1"), ElementsAre(v1::Job::FAILED));
  EXPECT_THAT(ended_, ElementsAre("job-1 FAILED"));
}

TEST_F(JobStateMachineTest, WorkerLostFailsTheGangBlamedOnIt) {
  Connect("w1", 1);
  Connect("w2", 1);
  Add("job-1", Spec(2));
  Effects placed;
  cycle_.Run(&placed);
  Effects lost;
  faults_.WorkerLost("w2", "no heartbeat for 10s", &lost);
  EXPECT_THAT(States(lost, "job-1"), ElementsAre(v1::Job::FAILED));
  EXPECT_THAT(LastReason(lost, "job-1"), HasSubstr("worker w2 lost (no heartbeat for 10s) running rank 1"));
  EXPECT_EQ(Sent(lost, "w1", Msg::kCancel).size(), 1u) << "the rank left on w1 is stopped";
  EXPECT_TRUE(Sent(lost, "w2", Msg::kCancel).empty()) << "w2's rank is counted as gone";
  EXPECT_THAT(ended_, ElementsAre("job-1 FAILED"));
}

}  // namespace
}  // namespace trainyard::testing
