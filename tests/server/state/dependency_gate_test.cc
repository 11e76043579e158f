// DependencyGate (job.after) inside the scheduling cycle, without a store: who waits and
// why, who is released, who fails and in whose words, and what a submit is refused for,
// read from the recorded Effects and the job table.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "tests/server/state/cycle_fixture.h"

namespace trainyard::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

class DependencyGateTest : public CycleFixture {
 protected:
  static v1::JobSpec After(const std::string& after, int dp = 1) {
    v1::JobSpec spec = Spec(dp);
    spec.mutable_job()->set_after(after);
    return spec;
  }
  // Places what fits and returns what the pass recorded.
  Effects Pass() {
    Effects fx;
    cycle_.Run(&fx);
    return fx;
  }
  // CheckNew of a spec with this job.after, by an admin ("") or by submitter `submitter`,
  // who sees only its own jobs.
  absl::Status Check(const std::string& after, const std::string& submitter = "") {
    std::function<bool(const std::string&)> may_see;
    if (!submitter.empty()) may_see = [submitter](const std::string& owner) { return owner == submitter; };
    return dependencies_->CheckNew(After(after), may_see);
  }
};

TEST_F(DependencyGateTest, ADependentWaitsApartNamingTheJobAndItsStateThenStartsWhenItSucceeds) {
  Connect("w1", 2);
  Add("job-1", Spec(1));
  // job-2 comes first in priority yet waits: it takes no slot, no reservation, no place
  // in the queue, and job-3 behind it is placed.
  v1::JobSpec waits = After("job-1");
  waits.mutable_job()->set_priority(10);
  Add("job-2", waits);
  Add("job-3", Spec(1));
  Effects first = Pass();
  EXPECT_THAT(States(first, "job-1"), ElementsAre(v1::Job::SCHEDULED));
  EXPECT_THAT(States(first, "job-3"), ElementsAre(v1::Job::SCHEDULED));
  EXPECT_EQ(Job("job-2").pending_reason(), "waiting for job-1 to succeed (job-1 is PENDING)");
  EXPECT_THAT(cycle_.queue_order(), IsEmpty());
  v1::Job view;
  jobs_.FillEstimate("job-2", &view);
  EXPECT_EQ(view.reserved_workers_size(), 0);

  Effects running;
  Ranks("job-1", v1::RankState::RUNNING, &running);
  Pass();
  EXPECT_EQ(Job("job-2").pending_reason(), "waiting for job-1 to succeed (job-1 is RUNNING)");

  Effects done;
  Ranks("job-1", v1::RankState::EXITED, &done);
  EXPECT_EQ(Job("job-1").state(), v1::Job::SUCCEEDED);
  Effects released = Pass();
  EXPECT_THAT(States(released, "job-2"), ElementsAre(v1::Job::SCHEDULED));
}

TEST_F(DependencyGateTest, EachConditionReleasesWhenItHolds) {
  Connect("w1", 8);
  Add("job-1", Spec(1));
  Add("started", After("job-1:started"));
  Add("ended", After("job-1:ended"));
  Add("failed", After("job-1:failed"));
  Pass();
  EXPECT_EQ(Job("started").pending_reason(), "waiting for job-1 to start (job-1 is PENDING)");
  EXPECT_EQ(Job("ended").pending_reason(), "waiting for job-1 to end (job-1 is PENDING)");
  EXPECT_EQ(Job("failed").pending_reason(), "waiting for job-1 to fail (job-1 is PENDING)");
  Effects running;
  Ranks("job-1", v1::RankState::RUNNING, &running);
  Effects after_start = Pass();
  EXPECT_THAT(States(after_start, "started"), ElementsAre(v1::Job::SCHEDULED));
  EXPECT_THAT(States(after_start, "ended"), ElementsAre(v1::Job::PENDING)) << "its reason names RUNNING now";
  Effects failed;
  Ranks("job-1", v1::RankState::FAILED, &failed, "exit 3");
  EXPECT_EQ(Job("job-1").state(), v1::Job::FAILED);
  Effects after_end = Pass();
  EXPECT_THAT(States(after_end, "ended"), ElementsAre(v1::Job::SCHEDULED));
  EXPECT_THAT(States(after_end, "failed"), ElementsAre(v1::Job::SCHEDULED));
}

TEST_F(DependencyGateTest, AConditionThatCanNoLongerHoldFailsTheChainAtOnceWithReasons) {
  Connect("w1", 1);
  Add("job-1", Spec(1));
  Add("job-2", After("job-1"));
  Add("job-3", After("job-2"));
  Add("job-4", After("job-1:failed"));
  Add("job-5", After("job-1:ended,job-3:ended"));
  Pass();
  Effects running;
  Ranks("job-1", v1::RankState::RUNNING, &running);
  Effects failed;
  Ranks("job-1", v1::RankState::FAILED, &failed, "exit 3");
  // In the same write as job-1's end, before any pass.
  EXPECT_THAT(States(failed, "job-2"), ElementsAre(v1::Job::FAILED));
  EXPECT_EQ(LastReason(failed, "job-2"), "dependency job-1 ended FAILED; job.after needed it to succeed");
  EXPECT_THAT(States(failed, "job-3"), ElementsAre(v1::Job::FAILED));
  EXPECT_EQ(Job("job-3").failure_reason(), "dependency job-2 ended FAILED; job.after needed it to succeed");
  EXPECT_THAT(States(failed, "job-4"), IsEmpty()) << "its condition holds now";
  EXPECT_THAT(States(failed, "job-5"), IsEmpty()) << "ended holds for a failed job";
  Effects next = Pass();
  EXPECT_THAT(States(next, "job-4"), ElementsAre(v1::Job::SCHEDULED));
  EXPECT_EQ(Job("job-5").state(), v1::Job::PENDING) << "one slot, taken by job-4";
}

TEST_F(DependencyGateTest, ACancelledJobThatNeverRanFailsAStartedDependent) {
  Add("job-1", Spec(4));  // no worker: it never starts
  Add("job-2", After("job-1:started"));
  Pass();
  Effects fx;
  ASSERT_TRUE(jobs_.Cancel("job-1", "not needed", &fx).ok());
  EXPECT_THAT(States(fx, "job-2"), ElementsAre(v1::Job::FAILED));
  EXPECT_EQ(Job("job-2").failure_reason(),
            "dependency job-1 ended CANCELLED without starting; job.after needed it to start");
}

TEST_F(DependencyGateTest, SeveralUnmetJobsAreCountedAfterTheFirst) {
  Add("job-1", Spec(4));
  Add("job-2", Spec(4));
  Add("job-3", Spec(4));
  Add("job-4", After("job-1, job-2:ended ,job-3:started"));
  Pass();
  EXPECT_EQ(Job("job-4").pending_reason(), "waiting for job-1 to succeed (job-1 is PENDING) and 2 more jobs");
}

TEST_F(DependencyGateTest, RecoveryFailsADependentWhoseDependencyEndedBeforeTheCrash) {
  // As a store read back after a crash between job-1's end and job-2's failure: job-1
  // ended FAILED, job-2 still PENDING.
  Add("job-1", Spec(4));
  Effects cancelled;
  ASSERT_TRUE(jobs_.Cancel("job-1", "gone", &cancelled).ok());
  Add("job-2", After("job-1"));
  Add("job-3", After("job-2:ended"));
  Add("job-4", After("job-1:ended"));
  Effects fx;
  dependencies_->FailUnsatisfiable(&fx);
  EXPECT_THAT(States(fx, "job-2"), ElementsAre(v1::Job::FAILED));
  EXPECT_EQ(Job("job-2").failure_reason(), "dependency job-1 ended CANCELLED; job.after needed it to succeed");
  EXPECT_THAT(States(fx, "job-3"), IsEmpty()) << "ended holds: job-2 ended";
  EXPECT_THAT(States(fx, "job-4"), IsEmpty());
  // A dependency missing from the table (a store edited by hand) fails its dependent.
  Add("job-5", After("job-99"));
  Effects missing;
  dependencies_->FailUnsatisfiable(&missing);
  EXPECT_EQ(Job("job-5").failure_reason(), "dependency job-99 does not exist; job.after needed it to succeed");
}

TEST_F(DependencyGateTest, SubmitRefusesUnknownUnseenAndHopelessDependencies) {
  Add("job-1", Spec(1), "alice");
  Add("job-2", Spec(1), "bob");
  EXPECT_TRUE(Check("job-1", "alice").ok());
  EXPECT_TRUE(Check("job-1:started,job-2:ended").ok()) << "an admin sees every owner's jobs";

  absl::Status unknown = Check("job-7");
  EXPECT_EQ(unknown.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(unknown.message(), "job.after: job job-7 not found");
  // bob's job reads exactly as one that does not exist.
  absl::Status unseen = Check("job-2", "alice");
  EXPECT_EQ(unseen.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(unseen.message(), "job.after: job job-2 not found");

  Effects fx;
  ASSERT_TRUE(jobs_.Cancel("job-1", "no", &fx).ok());
  absl::Status hopeless = Check("job-1");
  EXPECT_EQ(hopeless.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(hopeless.message(), "job.after: job-1 already ended CANCELLED, so it can never be succeeded");
  EXPECT_EQ(Check("job-1:started").message(),
            "job.after: job-1 already ended CANCELLED without starting, so it can never be started");
  EXPECT_TRUE(Check("job-1:ended").ok());

  EXPECT_EQ(Check("job-1,job-1").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Check("job-1:soon").code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(DependencyGateTest, AChainPastTheDepthLimitIsRefusedAndOneAtItIsNot) {
  Add("c1", Spec(1));
  for (int i = 2; i <= spec::kMaxDependencyDepth - 1; ++i) {
    Add("c" + std::to_string(i), After("c" + std::to_string(i - 1)));
  }
  const std::string last = "c" + std::to_string(spec::kMaxDependencyDepth - 1);
  std::string why;
  EXPECT_EQ(dependencies_->Depth(last, &why), spec::kMaxDependencyDepth - 1);
  EXPECT_TRUE(Check(last).ok()) << "the new job is the chain's 32nd";
  Add("c" + std::to_string(spec::kMaxDependencyDepth), After(last));
  absl::Status deep = Check("c" + std::to_string(spec::kMaxDependencyDepth));
  EXPECT_EQ(deep.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(deep.message(), "job.after: this job would end a chain of 33 dependent jobs, over the limit of 32");
  // The longest path counts, not the first.
  EXPECT_EQ(Check("c1,c" + std::to_string(spec::kMaxDependencyDepth)).code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(DependencyGateTest, CyclesCannotBeSubmittedAndAStoredOneIsRefusedNotFollowed) {
  // A job cannot name itself or a later job: ids are given at creation, so the id it
  // would get is unknown when it is checked.
  Add("job-1", Spec(1));
  EXPECT_EQ(Check("job-2").code(), absl::StatusCode::kNotFound);
  // A cycle put into the table by hand (a store edited outside the controller): the
  // depth walk stops and says so rather than loop.
  Add("job-a", After("job-b"));
  Add("job-b", After("job-a"));
  std::string why;
  EXPECT_FALSE(dependencies_->Depth("job-a", &why).has_value());
  EXPECT_THAT(why, HasSubstr("cycle"));
  absl::Status s = Check("job-a");
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.message()), HasSubstr("the dependencies run in a cycle through job-a"));
}

}  // namespace
}  // namespace trainyard::testing
