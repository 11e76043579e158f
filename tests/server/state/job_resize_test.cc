// Resizing a job (JobService.ResizeJob) through JobManager with the fake clock, fake
// worker channels and a real SqliteJobStore: refusals first (unknown, ended, never started,
// dp out of range or not dividing the global batch, no checkpoints), then a running
// dp=2 job shrunk to dp=1 and grown back without using a restart, a resize waiting
// for slots, and a resize that a controller restart keeps.
#include <cstdio>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "server/policy/resize_policy.h"
#include "tests/server/state/manager_fixture.h"

namespace trainyard::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::SizeIs;
using Msg = v1::ControllerMessage;

class JobResizeTest : public ManagerFixture {
 protected:
  // dp=`dp`, grad_accum_steps=2, checkpoints every 5 steps under /ckpt.
  static v1::JobSpec Checkpointed(int dp, int max_restarts) {
    v1::JobSpec spec = Spec(dp, 1, max_restarts);
    spec.mutable_training()->set_grad_accum_steps(2);
    spec.mutable_checkpoint()->set_dir("/ckpt");
    spec.mutable_checkpoint()->set_interval(5);
    spec.mutable_checkpoint()->set_keep(2);
    spec.mutable_restart()->set_backoff_s(0);
    return spec;
  }
  static std::string Message(const absl::Status& s) { return std::string(s.message()); }
};

TEST_F(JobResizeTest, UnknownEndedAndNeverStartedJobsAreRefused) {
  Conn w1 = Connect("w1", 2);
  auto unknown = manager_->Resize("job-9", 1);
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(Message(unknown.status()), "job job-9 not found");

  const std::string done = Submit(Checkpointed(1, 0));
  Report(w1, done, 1, {0}, v1::RankState::EXITED);
  ASSERT_EQ(Job(done).state(), v1::Job::SUCCEEDED);
  auto ended = manager_->Resize(done, 1);
  EXPECT_EQ(ended.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(Message(ended.status()),
            "job job-1 already ended SUCCEEDED; only a scheduled, running or restarting job can be resized");

  Submit(Spec(2));  // holds both slots
  const std::string waiting = Submit(Checkpointed(2, 0));
  ASSERT_EQ(Job(waiting).state(), v1::Job::PENDING);
  auto unstarted = manager_->Resize(waiting, 1);
  EXPECT_EQ(unstarted.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(Message(unstarted.status()), HasSubstr("has not started yet (PENDING)"));
  EXPECT_THAT(Message(unstarted.status()), HasSubstr("submit it with parallelism.dp=1"));
  EXPECT_EQ(Job(waiting).attempt(), 0);
}

TEST_F(JobResizeTest, OutOfRangeOrNonDividingDpAndJobsWithoutCheckpointsChangeNothing) {
  Conn w1 = Connect("w1", 4);
  v1::JobSpec spec = Checkpointed(4, 1);
  spec.mutable_training()->set_grad_accum_steps(1);  // 4 micro-batches per step
  spec.mutable_restart()->set_min_dp(2);
  const std::string id = Submit(spec);
  Report(w1, id, 1, {0, 1, 2, 3}, v1::RankState::RUNNING);
  const int64_t seq = Job(id).last_seq();
  struct Case {
    int dp;
    std::string message;
  };
  for (const Case& c : std::vector<Case>{
           {0, "ResizeJobRequest.dp: must be in [2, 4] for job job-1 (restart.min_dp=2, parallelism.dp=4 as "
               "submitted; a job never grows past it), got 0"},
           {1, "ResizeJobRequest.dp: must be in [2, 4]"},
           {5, "ResizeJobRequest.dp: must be in [2, 4]"},
           {3, "ResizeJobRequest.dp: job job-1 cannot run at dp=3: parallelism.dp=3 does not divide "
               "dp·grad_accum_steps=4, so the global batch would change"}}) {
    auto r = manager_->Resize(id, c.dp);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << c.dp;
    EXPECT_EQ(Message(r.status()).rfind(c.message, 0), 0u) << Message(r.status());
  }
  // Already at dp=4: OK, nothing happens.
  auto same = manager_->Resize(id, 4);
  ASSERT_TRUE(same.ok()) << same.status();
  EXPECT_EQ(same->state(), v1::Job::RUNNING);
  EXPECT_EQ(same->last_seq(), seq);

  // A job without checkpoints would restart from step 0.
  Conn w2 = Connect("w2", 2);
  v1::JobSpec plain = Spec(2, 1, 1);
  const std::string bare = Submit(plain);
  Report(w2, bare, 1, {0, 1}, v1::RankState::RUNNING);
  auto lossy = manager_->Resize(bare, 1);
  EXPECT_EQ(lossy.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(Message(lossy.status()),
            "job job-2 takes no checkpoints (checkpoint.interval=0), so a resize would restart it from step 0 and "
            "lose its progress; cancel and resubmit it with parallelism.dp=1 instead");
  EXPECT_EQ(Job(id).last_seq(), seq);
  EXPECT_EQ(Job(bare).state(), v1::Job::RUNNING);
  EXPECT_THAT(w1.channel->Of(Msg::kCancel), SizeIs(0));
  EXPECT_THAT(w2.channel->Of(Msg::kCancel), SizeIs(0));
}

TEST_F(JobResizeTest, ARunningJobShrinksAndGrowsFromItsCheckpointWithoutUsingARestart) {
  Conn w1 = Connect("w1", 2);
  const std::string id = Submit(Checkpointed(2, /*max_restarts=*/1));
  Report(w1, id, 1, {0, 1}, v1::RankState::RUNNING);
  SaveCheckpoint(w1, id, 1, 5);

  auto resized = manager_->Resize(id, 1);
  ASSERT_TRUE(resized.ok()) << resized.status();
  EXPECT_EQ(resized->state(), v1::Job::RESTARTING);
  const std::string why =
      "resize to dp=1 requested (was 2; grad_accum_steps=4 keeps the global batch): restarting from the "
      "checkpoint of step 5, not counted against restart.max_restarts";
  EXPECT_EQ(LastReason(id, v1::Job::RESTARTING), why);
  auto cancels = w1.channel->Of(Msg::kCancel);
  ASSERT_THAT(cancels, SizeIs(1));
  EXPECT_EQ(cancels[0].cancel().attempt(), 1);
  EXPECT_EQ(cancels[0].cancel().reason(), "resize to dp=1 requested");
  EXPECT_EQ(w1.channel->Of(Msg::kAssign).size(), 1u) << "placed only once the old ranks are gone";
  // A second request while it restarts at dp=1 changes nothing.
  EXPECT_EQ(manager_->Resize(id, 1)->last_seq(), Job(id).last_seq());

  Report(w1, id, 1, {0, 1}, v1::RankState::KILLED, "cancelled");
  v1::Job job = Job(id);
  ASSERT_EQ(job.state(), v1::Job::SCHEDULED);
  EXPECT_EQ(job.attempt(), 2);
  EXPECT_EQ(job.world_size(), 1);
  EXPECT_EQ(job.spec().parallelism().dp(), 2) << "the job keeps its submitted spec";
  EXPECT_EQ(job.failure_causes_size(), 0);
  EXPECT_EQ(LastReason(id, v1::Job::SCHEDULED), "placed on w1×1 (resized on request: dp=1 of 2, grad_accum_steps=4)");
  auto assigns = w1.channel->Of(Msg::kAssign);
  ASSERT_THAT(assigns, SizeIs(2));
  const v1::Assign& small = assigns[1].assign();
  EXPECT_EQ(small.world_size(), 1);
  EXPECT_EQ(small.spec().parallelism().dp(), 1);
  EXPECT_EQ(small.spec().training().grad_accum_steps(), 4);
  EXPECT_EQ(small.resume_path(), "/ckpt/job-1/step-00000005-attempt-1");
  EXPECT_EQ(small.checkpoint_dir(), "/ckpt/job-1");

  // Back to dp=2: it grows, again from its newest checkpoint.
  Report(w1, id, 2, {0}, v1::RankState::RUNNING);
  SaveCheckpoint(w1, id, 2, 10);
  ASSERT_TRUE(manager_->Resize(id, 2).ok());
  Report(w1, id, 2, {0}, v1::RankState::KILLED, "cancelled");
  job = Job(id);
  ASSERT_EQ(job.state(), v1::Job::SCHEDULED);
  EXPECT_EQ(job.world_size(), 2);
  assigns = w1.channel->Of(Msg::kAssign);
  ASSERT_THAT(assigns, SizeIs(3));
  EXPECT_EQ(assigns[2].assign().spec().parallelism().dp(), 2);
  EXPECT_EQ(assigns[2].assign().spec().training().grad_accum_steps(), 2);
  EXPECT_EQ(assigns[2].assign().resume_path(), "/ckpt/job-1/step-00000010-attempt-2");
  EXPECT_EQ(LastReason(id, v1::Job::SCHEDULED), "placed on w1×2 (resized on request: dp=2 of 2, grad_accum_steps=2)");

  // Two resizes later the one restart is still there.
  Report(w1, id, 3, {1}, v1::RankState::FAILED, "exit code 1");
  EXPECT_EQ(LastReason(id, v1::Job::RESTARTING), "rank 1 on worker w1 failed: exit code 1; restart 1 of 1");
  Report(w1, id, 3, {0}, v1::RankState::KILLED);
  ASSERT_EQ(Job(id).state(), v1::Job::SCHEDULED);
  EXPECT_EQ(Job(id).attempt(), 4);
  Report(w1, id, 4, {0}, v1::RankState::FAILED, "exit code 1");
  EXPECT_EQ(Job(id).state(), v1::Job::FAILED);
  EXPECT_THAT(Job(id).failure_reason(), HasSubstr("failed 2 attempts (restart.max_restarts=1)"));
}

TEST_F(JobResizeTest, AShardedJobShrinksToAShardDegreeThatDividesItsNewDp) {
  Conn w1 = Connect("w1", 2);
  v1::JobSpec spec = Checkpointed(2, 0);
  spec.mutable_parallelism()->set_dp_shard(2);  // FSDP over both data ranks
  const std::string id = Submit(spec);
  Report(w1, id, 1, {0, 1}, v1::RankState::RUNNING);
  ASSERT_TRUE(manager_->Resize(id, 1).ok());
  Report(w1, id, 1, {0, 1}, v1::RankState::KILLED, "cancelled");
  ASSERT_EQ(Job(id).state(), v1::Job::SCHEDULED);
  EXPECT_EQ(LastReason(id, v1::Job::SCHEDULED),
            "placed on w1×1 (resized on request: dp=1 of 2, grad_accum_steps=4, dp_shard=1)");
  auto assigns = w1.channel->Of(Msg::kAssign);
  ASSERT_THAT(assigns, SizeIs(2));
  EXPECT_EQ(assigns[1].assign().spec().parallelism().dp(), 1);
  EXPECT_EQ(assigns[1].assign().spec().parallelism().dp_shard(), 1);
  EXPECT_EQ(Job(id).spec().parallelism().dp_shard(), 2) << "the job keeps its submitted spec";
}

TEST_F(JobResizeTest, AResizeWaitsForItsSlotsAtExactlyItsDp) {
  Conn w1 = Connect("w1", 2);
  Conn w2 = Connect("w2", 1);
  v1::JobSpec spec = Checkpointed(2, 0);
  spec.mutable_restart()->set_min_dp(1);
  spec.mutable_restart()->set_elastic_wait_s(0);
  const std::string id = Submit(spec);
  ASSERT_TRUE(manager_->Resize(id, 1).ok());
  Report(w1, id, 1, {0, 1}, v1::RankState::KILLED);
  ASSERT_EQ(Job(id).world_size(), 1);
  const std::string other = Submit(Spec(2));  // takes w1's other slot and w2's
  ASSERT_EQ(Job(other).state(), v1::Job::SCHEDULED);

  ASSERT_TRUE(manager_->Resize(id, 2).ok());
  Report(w1, id, 2, {0}, v1::RankState::KILLED);
  Pass(absl::Seconds(5), {w1, w2});
  v1::Job job = Job(id);
  ASSERT_EQ(job.state(), v1::Job::PENDING) << "no elastic shrink below a requested dp";
  EXPECT_THAT(job.pending_reason(), HasSubstr("needs 2 slots"));
  EXPECT_THAT(job.pending_reason(), HasSubstr("; resize to dp=2 of 2 requested"));

  Report(w1, other, 1, {0}, v1::RankState::EXITED);
  Report(w2, other, 1, {1}, v1::RankState::EXITED);
  job = Job(id);
  ASSERT_EQ(job.state(), v1::Job::SCHEDULED);
  EXPECT_EQ(job.world_size(), 2);
  EXPECT_EQ(job.attempt(), 3);
}

TEST_F(JobResizeTest, AControllerRestartKeepsAPendingResizeAndTheRestartCount) {
  Conn w1 = Connect("w1", 2);
  v1::JobSpec spec = Checkpointed(2, /*max_restarts=*/1);
  spec.mutable_restart()->set_backoff_s(10);
  const std::string id = Submit(spec);
  ASSERT_TRUE(manager_->Resize(id, 1).ok());  // attempt 1 ends by a resize
  Report(w1, id, 1, {0, 1}, v1::RankState::KILLED);
  ASSERT_EQ(Job(id).attempt(), 2);
  Report(w1, id, 2, {0}, v1::RankState::FAILED, "exit code 1");  // restart 1 of 1, backing off
  ASSERT_EQ(Job(id).state(), v1::Job::PENDING);

  // While it backs off, ask for dp=1 again: its restart would otherwise try dp=2.
  auto r = manager_->Resize(id, 1);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->pending_reason(),
            "restarting: backing off until 2023-11-14T22:13:30Z (restart 1 of 1); then at dp=1 (resize requested)");
  Restart();
  EXPECT_EQ(Job(id).pending_reason(), r->pending_reason());
  Conn back = Connect("w1", 2);
  Pass(absl::Seconds(10), {back});
  v1::Job job = Job(id);
  ASSERT_EQ(job.state(), v1::Job::SCHEDULED);
  EXPECT_EQ(job.world_size(), 1);
  EXPECT_EQ(back.channel->Of(Msg::kAssign)[0].assign().spec().training().grad_accum_steps(), 4);
  // The one restart is used: the next failure ends the job.
  Report(back, id, 3, {0}, v1::RankState::FAILED, "exit code 1");
  EXPECT_EQ(Job(id).state(), v1::Job::FAILED);
}

TEST(ResizePolicyTest, TargetOfReadsOnlyResizeReasons) {
  EXPECT_EQ(ResizePolicy::TargetOf(ResizePolicy::CancelReason(3)), 3);
  EXPECT_EQ(ResizePolicy::TargetOf("resize to dp=12 requested (was 4; ...)"), 12);
  EXPECT_EQ(ResizePolicy::TargetOf("restarting: waiting for slots"), std::nullopt);
  EXPECT_EQ(ResizePolicy::TargetOf("resize to dp=0 requested"), std::nullopt);
  EXPECT_EQ(ResizePolicy::TargetOf("resize to dp=99999999999"), std::nullopt);
  EXPECT_EQ(ResizePolicy::TargetOf("resize to dp="), std::nullopt);
}

}  // namespace
}  // namespace trainyard::testing
