// job.after through JobManager and a real SqliteJobStore: refusals store nothing, a
// waiting dependent keeps its place and reason across a controller restart, a chain
// fails down with reasons stored, and a restart finishes a failure a crash cut off.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/server/state/manager_fixture.h"

namespace trainyard::testing {
namespace {

using ::testing::HasSubstr;
using Msg = v1::ControllerMessage;

class JobDependenciesTest : public ManagerFixture {
 protected:
  static v1::JobSpec After(const std::string& after, int dp = 1) {
    v1::JobSpec spec = Spec(dp);
    spec.mutable_job()->set_after(after);
    return spec;
  }
  size_t StoredJobs() {
    auto jobs = db_->LoadJobs();
    EXPECT_TRUE(jobs.ok()) << jobs.status();
    return jobs.ok() ? jobs->size() : 0;
  }
};

TEST_F(JobDependenciesTest, RefusalsAtSubmitStoreNothing) {
  Connect("w1", 1);
  const std::string a = Submit(Spec(1), "alice");
  const std::string b = Submit(Spec(1), "bob");
  ASSERT_EQ(StoredJobs(), 2u);
  auto unknown = manager_->Submit(After("job-77"), "alice");
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(unknown.status().message(), "job.after: job job-77 not found");
  // alice, a submitter, may not name bob's job; an admin (no filter) may.
  auto others = manager_->Submit(After(b), "alice", [](const std::string& owner) { return owner == "alice"; });
  EXPECT_EQ(others.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(others.status().message(), "job.after: job " + b + " not found");
  v1::JobSpec validated = After(b);
  EXPECT_EQ(manager_->Validate(&validated, [](const std::string& owner) { return owner == "alice"; }).code(),
            absl::StatusCode::kNotFound)
      << "refused before a preflight too";
  auto bad = manager_->Submit(After(a + "," + a), "alice");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(StoredJobs(), 2u);
  EXPECT_TRUE(manager_->Submit(After(b), "admin").ok());
  EXPECT_EQ(StoredJobs(), 3u);
}

TEST_F(JobDependenciesTest, AWaitingChainSurvivesARestartAndFailsDownWithReasons) {
  Conn w1 = Connect("w1", 2);
  const std::string a = Submit(Spec(1));
  const std::string b = Submit(After(a));
  const std::string c = Submit(After(b));
  const std::string d = Submit(After(a + ":failed"));
  Report(w1, a, 1, {0}, v1::RankState::RUNNING);
  EXPECT_EQ(Job(b).pending_reason(), "waiting for " + a + " to succeed (" + a + " is RUNNING)");
  EXPECT_EQ(Job(c).pending_reason(), "waiting for " + b + " to succeed (" + b + " is PENDING)");
  EXPECT_EQ(Job(b).reserved_workers_size(), 0);

  Restart();
  EXPECT_EQ(Job(b).state(), v1::Job::PENDING);
  EXPECT_EQ(Job(b).pending_reason(), "waiting for " + a + " to succeed (" + a + " is RUNNING)");
  // The worker comes back still running a's attempt; a succeeds and b starts, c still
  // waits.
  v1::RunningAttempt kept;
  kept.set_job_id(a);
  kept.set_attempt(1);
  Conn w1b = Connect("w1", 2, {kept});
  Report(w1b, a, 1, {0}, v1::RankState::EXITED);
  ASSERT_EQ(Job(a).state(), v1::Job::SUCCEEDED);
  EXPECT_EQ(Job(b).state(), v1::Job::SCHEDULED);
  EXPECT_EQ(Job(c).state(), v1::Job::PENDING);
  EXPECT_EQ(Job(d).state(), v1::Job::FAILED) << "a succeeded: d's condition can no longer hold";
  EXPECT_EQ(LastReason(d, v1::Job::FAILED), "dependency " + a + " ended SUCCEEDED; job.after needed it to fail");

  Report(w1b, b, 1, {0}, v1::RankState::RUNNING);
  Report(w1b, b, 1, {0}, v1::RankState::FAILED, "exit 1");
  ASSERT_EQ(Job(b).state(), v1::Job::FAILED);
  EXPECT_EQ(Job(c).state(), v1::Job::FAILED);
  EXPECT_EQ(LastReason(c, v1::Job::FAILED), "dependency " + b + " ended FAILED; job.after needed it to succeed");
  Restart();
  EXPECT_EQ(Job(c).failure_reason(), "dependency " + b + " ended FAILED; job.after needed it to succeed");
}

TEST_F(JobDependenciesTest, ARestartFailsADependentWhoseDependencyEndedJustBeforeTheCrash) {
  Connect("w1", 2);
  Submit(Spec(2));                        // takes both slots
  const std::string a = Submit(Spec(2));  // so a stays PENDING
  const std::string b = Submit(After(a));
  // The crash cut the write of a's end from b's failure: only a's row reached the store.
  v1::Job ended = Job(a);
  ended.set_state(v1::Job::CANCELLED);
  ASSERT_TRUE(db_->PutJob(ended).ok());
  Restart();
  EXPECT_EQ(Job(b).state(), v1::Job::FAILED);
  EXPECT_EQ(LastReason(b, v1::Job::FAILED), "dependency " + a + " ended CANCELLED; job.after needed it to succeed");
}

}  // namespace
}  // namespace trainyard::testing
