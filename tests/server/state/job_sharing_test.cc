// Sharing the fleet through JobManager, with the fake clock, fake worker channels and a
// real SqliteJobStore: checkpoints on request (CheckpointJob) and their answers,
// preemption that checkpoints the victim first (and its grace deadline), the guard
// rails, cordon and drain, and what a controller restart keeps of all of it.
#include <cstdio>
#include <optional>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/server/state/manager_fixture.h"

namespace trainyard::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::SizeIs;
using Msg = v1::ControllerMessage;

class JobSharingTest : public ManagerFixture {
 protected:
  JobSharingTest() {
    sharing_.preemption_grace = absl::Seconds(120);
    sharing_.max_preemptions_per_hour = 3;
    manager_ = NewManager();
  }

  // `world` ranks at priority `priority`, checkpoints under /ckpt every 5 steps.
  static v1::JobSpec Checkpointed(int dp, int priority, int max_restarts = 0) {
    v1::JobSpec spec = Spec(dp, 1, max_restarts, priority);
    spec.mutable_checkpoint()->set_dir("/ckpt");
    spec.mutable_checkpoint()->set_interval(5);
    spec.mutable_restart()->set_backoff_s(0);
    spec.mutable_training()->set_steps(100);
    return spec;
  }
  void Step(const Conn& c, const std::string& job, int attempt, int64_t step) {
    v1::Event e;
    e.set_job_id(job);
    e.set_attempt(attempt);
    e.set_rank(0);
    e.set_source_seq(++source_seq_[{job, attempt, 0}]);
    e.mutable_step_metrics()->set_step(step);
    e.mutable_step_metrics()->set_step_ms(100);
    Send(c, {e});
  }
  std::vector<std::string> Logs(const std::string& id) {
    std::vector<std::string> out;
    for (const auto& e : Stored(id)) {
      if (e.has_log() && e.rank() == -1) out.push_back(e.log().message());
    }
    return out;
  }
  // A CheckpointJob whose answer lands in `answer`.
  void Ask(const std::string& id, absl::Duration timeout, std::optional<absl::StatusOr<v1::CheckpointRef>>* answer) {
    manager_->RequestCheckpoint(id, timeout, [answer](absl::StatusOr<v1::CheckpointRef> r) { *answer = std::move(r); });
  }
};

TEST_F(JobSharingTest, ACheckpointRequestIsAnsweredByTheRanksRequestedCheckpoint) {
  Conn w1 = Connect("w1", 2);
  v1::JobSpec spec = Checkpointed(2, 0);
  spec.mutable_checkpoint()->set_interval(0);  // only on request
  const std::string id = Submit(spec);
  Report(w1, id, 1, {0, 1}, v1::RankState::RUNNING);
  EXPECT_EQ(w1.channel->Of(Msg::kAssign)[0].assign().checkpoint_dir(), "/ckpt/job-1")
      << "a job with a directory gets it even without an interval";
  Step(w1, id, 1, 7);

  std::optional<absl::StatusOr<v1::CheckpointRef>> answer;
  Ask(id, absl::Seconds(300), &answer);
  EXPECT_FALSE(answer.has_value());
  auto requests = w1.channel->Of(Msg::kCheckpoint);
  ASSERT_THAT(requests, SizeIs(1)) << "one request per worker of the attempt";
  EXPECT_EQ(requests[0].checkpoint().job_id(), id);
  EXPECT_EQ(requests[0].checkpoint().attempt(), 1);

  // A checkpoint nobody asked for, or one older than the request, answers nothing.
  SaveCheckpoint(w1, id, 1, 7, /*requested=*/false);
  EXPECT_FALSE(answer.has_value());
  SaveCheckpoint(w1, id, 1, 9, /*requested=*/true);
  ASSERT_TRUE(answer.has_value());
  ASSERT_TRUE(answer->ok()) << answer->status();
  EXPECT_EQ((*answer)->step(), 9);
  EXPECT_EQ((*answer)->path(), "/ckpt/job-1/step-00000009-attempt-1");
  EXPECT_EQ((*answer)->attempt(), 1);
  EXPECT_EQ(Job(id).last_checkpoint().step(), 9);
  EXPECT_EQ(Job(id).state(), v1::Job::RUNNING) << "a checkpoint request alone stops nothing";
}

TEST_F(JobSharingTest, CheckpointRequestsAreRefusedTimedOutOrAbortedPrecisely) {
  Conn w1 = Connect("w1", 2);
  std::optional<absl::StatusOr<v1::CheckpointRef>> a;
  Ask("job-9", absl::Seconds(10), &a);
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->status().code(), absl::StatusCode::kNotFound);

  const std::string bare = Submit(Spec(1));  // no checkpoint.dir
  Report(w1, bare, 1, {0}, v1::RankState::RUNNING);
  Ask(bare, absl::Seconds(10), &a);
  EXPECT_EQ(a->status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(a->status().message()), HasSubstr("sets no checkpoint.dir"));

  const std::string waiting = Submit(Checkpointed(2, 0));  // one slot left: PENDING
  ASSERT_EQ(Job(waiting).state(), v1::Job::PENDING);
  Ask(waiting, absl::Seconds(10), &a);
  EXPECT_EQ(a->status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(a->status().message()), HasSubstr("is PENDING: only a running attempt can checkpoint"));

  ASSERT_TRUE(manager_->Cancel(bare, "").ok());
  Report(w1, bare, 1, {0}, v1::RankState::KILLED);
  Ask(bare, absl::Seconds(10), &a);
  EXPECT_EQ(a->status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(a->status().message()), HasSubstr("already ended CANCELLED"));

  // Timed out: the ranks never answered.
  Report(w1, waiting, 1, {0, 1}, v1::RankState::RUNNING);
  ASSERT_EQ(Job(waiting).state(), v1::Job::RUNNING);
  std::optional<absl::StatusOr<v1::CheckpointRef>> late;
  Ask(waiting, absl::Seconds(30), &late);
  Pass(absl::Seconds(29), {w1});
  EXPECT_FALSE(late.has_value());
  Pass(absl::Seconds(2), {w1});
  ASSERT_TRUE(late.has_value());
  EXPECT_EQ(late->status().code(), absl::StatusCode::kDeadlineExceeded);

  // Aborted: the attempt failed before its checkpoint was complete.
  std::optional<absl::StatusOr<v1::CheckpointRef>> lost;
  Ask(waiting, absl::Seconds(300), &lost);
  Report(w1, waiting, 1, {1}, v1::RankState::FAILED, "exit code 1");
  Pass(absl::Seconds(1), {w1});
  ASSERT_TRUE(lost.has_value());
  EXPECT_EQ(lost->status().code(), absl::StatusCode::kAborted);
  EXPECT_THAT(std::string(lost->status().message()), HasSubstr("attempt 1 ended"));
}

TEST_F(JobSharingTest, AnUrgentJobPreemptsAfterTheVictimsCheckpointAndTheVictimResumesFromIt) {
  Conn w1 = Connect("w1", 2);
  const std::string low = Submit(Checkpointed(2, /*priority=*/0, /*max_restarts=*/0), "bob");
  Report(w1, low, 1, {0, 1}, v1::RankState::RUNNING);
  Step(w1, low, 1, 12);
  SaveCheckpoint(w1, low, 1, 10, false);

  const std::string urgent = Submit(Checkpointed(2, /*priority=*/5), "alice");
  v1::Job pending = Job(urgent);
  ASSERT_EQ(pending.state(), v1::Job::PENDING);
  EXPECT_THAT(pending.pending_reason(), HasSubstr("preempting job-1 (checkpointing, stopped at the latest at "));
  // Its start is estimated from the victim's grace, and the slots are reserved for it.
  Pass(absl::Seconds(1), {w1});
  pending = Job(urgent);
  ASSERT_TRUE(pending.has_estimated_start_time());
  EXPECT_LE(pending.estimated_start_time().seconds(), absl::ToUnixSeconds(clock_.Now() + absl::Seconds(119)));
  EXPECT_THAT(pending.reserved_workers(), ::testing::ElementsAre("w1", "w1"));
  auto requests = w1.channel->Of(Msg::kCheckpoint);
  ASSERT_THAT(requests, SizeIs(1));
  EXPECT_EQ(requests[0].checkpoint().job_id(), low);
  EXPECT_EQ(Job(low).state(), v1::Job::RUNNING) << "the victim trains on until its checkpoint is complete";
  EXPECT_THAT(w1.channel->Of(Msg::kCancel), SizeIs(0));
  EXPECT_THAT(Logs(low), ::testing::Contains(HasSubstr("preempted by job-2 (priority 5): saving a checkpoint")));

  // The victim's requested checkpoint: it stops.
  SaveCheckpoint(w1, low, 1, 13, /*requested=*/true);
  auto cancels = w1.channel->Of(Msg::kCancel);
  ASSERT_THAT(cancels, SizeIs(1));
  EXPECT_EQ(cancels[0].cancel().reason(), "preempted by job-2 (priority 5)");
  EXPECT_EQ(Job(low).state(), v1::Job::RESTARTING);
  EXPECT_EQ(LastReason(low, v1::Job::RESTARTING), "preempted by job-2 (priority 5)");
  Report(w1, low, 1, {0, 1}, v1::RankState::KILLED, "cancelled");

  v1::Job victim = Job(low);
  EXPECT_EQ(victim.state(), v1::Job::PENDING);
  EXPECT_THAT(victim.pending_reason(), ::testing::StartsWith("preempted by job-2 (priority 5); needs 2 slots"));
  EXPECT_EQ(victim.preemptions(), 1);
  EXPECT_EQ(victim.preempt_times_size(), 1);
  EXPECT_EQ(victim.failure_causes_size(), 0) << "a preemption is not a failure";
  EXPECT_EQ(victim.last_checkpoint().step(), 13);
  EXPECT_EQ(Job(urgent).state(), v1::Job::SCHEDULED);
  EXPECT_EQ(Job(urgent).attempt(), 1);

  // The urgent job ends; the victim resumes from its preemption checkpoint, with its
  // one restart (max_restarts=0: none) unused.
  Report(w1, urgent, 1, {0, 1}, v1::RankState::EXITED);
  victim = Job(low);
  ASSERT_EQ(victim.state(), v1::Job::SCHEDULED);
  EXPECT_EQ(victim.attempt(), 2);
  auto assigns = w1.channel->Of(Msg::kAssign);
  EXPECT_EQ(assigns.back().assign().job_id(), low);
  EXPECT_EQ(assigns.back().assign().resume_path(), "/ckpt/job-1/step-00000013-attempt-1");
}

TEST_F(JobSharingTest, AVictimThatMissesItsGraceIsStoppedAndResumesFromItsPreviousCheckpoint) {
  Conn w1 = Connect("w1", 2);
  const std::string low = Submit(Checkpointed(2, 0), "bob");
  Report(w1, low, 1, {0, 1}, v1::RankState::RUNNING);
  SaveCheckpoint(w1, low, 1, 5, false);
  const std::string urgent = Submit(Checkpointed(2, 1), "alice");
  ASSERT_THAT(w1.channel->Of(Msg::kCheckpoint), SizeIs(1));
  Pass(absl::Seconds(119), {w1});
  EXPECT_THAT(w1.channel->Of(Msg::kCancel), SizeIs(0));
  Pass(absl::Seconds(2), {w1});
  ASSERT_THAT(w1.channel->Of(Msg::kCancel), SizeIs(1));
  EXPECT_THAT(Logs(low), ::testing::Contains(HasSubstr(
                             "without a new checkpoint: none was complete within the 120 s grace; it resumes from step 5")));
  Report(w1, low, 1, {0, 1}, v1::RankState::KILLED);
  EXPECT_EQ(Job(urgent).state(), v1::Job::SCHEDULED);
  Report(w1, urgent, 1, {0, 1}, v1::RankState::EXITED);
  ASSERT_EQ(Job(low).state(), v1::Job::SCHEDULED);
  EXPECT_EQ(w1.channel->Of(Msg::kAssign).back().assign().resume_path(), "/ckpt/job-1/step-00000005-attempt-1");
}

TEST_F(JobSharingTest, OnlyStrictlyLowerPreemptibleJobsUnderTheHourlyCapArePreempted) {
  Conn w1 = Connect("w1", 1);
  v1::JobSpec pinned = Checkpointed(1, 0);
  pinned.mutable_job()->set_preemptible(false);
  const std::string a = Submit(pinned, "bob");
  Report(w1, a, 1, {0}, v1::RankState::RUNNING);
  const std::string b = Submit(Checkpointed(1, 3), "alice");
  EXPECT_THAT(w1.channel->Of(Msg::kCheckpoint), SizeIs(0)) << "job.preemptible = false";
  EXPECT_THAT(Job(b).pending_reason(), ::testing::Not(HasSubstr("preempting")));
  ASSERT_TRUE(manager_->Cancel(b, "").ok());

  const std::string same = Submit(Checkpointed(1, 0), "alice");
  EXPECT_THAT(w1.channel->Of(Msg::kCheckpoint), SizeIs(0)) << "equal priority never preempts";
  ASSERT_TRUE(manager_->Cancel(same, "").ok());
  ASSERT_TRUE(manager_->Cancel(a, "").ok());
  Report(w1, a, 1, {0}, v1::RankState::KILLED);

  // Without a checkpoint directory the victim stops at once. Preempted more than three
  // times (the cap) in an hour, it is left alone the fifth time.
  const std::string victim = Submit(Spec(1, 1, 0, 0), "bob");
  for (int round = 1; round <= 5; ++round) {
    Report(w1, victim, Job(victim).attempt(), {0}, v1::RankState::RUNNING);
    ASSERT_EQ(Job(victim).state(), v1::Job::RUNNING) << round;
    const std::string urgent = Submit(Spec(1, 1, 0, 9), "alice");
    if (round == 5) {
      EXPECT_EQ(Job(victim).state(), v1::Job::RUNNING);
      EXPECT_EQ(Job(urgent).state(), v1::Job::PENDING);
      break;
    }
    EXPECT_EQ(Job(victim).state(), v1::Job::RESTARTING) << round;
    EXPECT_THAT(Logs(victim).back(), HasSubstr("(no checkpoint.dir: it starts over)"));
    Report(w1, victim, Job(victim).attempt(), {0}, v1::RankState::KILLED);
    ASSERT_EQ(Job(urgent).state(), v1::Job::SCHEDULED) << round;
    Report(w1, urgent, 1, {0}, v1::RankState::EXITED);
    ASSERT_EQ(Job(victim).state(), v1::Job::SCHEDULED) << round;
    Pass(absl::Minutes(5), {w1});
  }
  EXPECT_EQ(Job(victim).preemptions(), 4);
  // An hour after the first, it may be preempted again.
  Pass(absl::Minutes(50), {w1});
  EXPECT_EQ(Job(victim).state(), v1::Job::RESTARTING);
}

TEST_F(JobSharingTest, OnlyTheQueuesHeadPreemptsAndItsVictimsAreCalledOffWhenItGoes) {
  Conn w1 = Connect("w1", 4);
  const std::string a = Submit(Checkpointed(2, 20), "carol");
  const std::string l = Submit(Checkpointed(2, 0), "bob");
  Report(w1, a, 1, {0, 1}, v1::RankState::RUNNING);
  Report(w1, l, 1, {0, 1}, v1::RankState::RUNNING);
  // The head needs all four slots; l alone is not enough, so it preempts nobody. The
  // second job could make room by preempting l, but could not start ahead of the head.
  const std::string head = Submit(Checkpointed(4, 20), "alice");
  const std::string second = Submit(Checkpointed(2, 10), "alice");
  EXPECT_EQ(Job(head).state(), v1::Job::PENDING);
  EXPECT_EQ(Job(second).state(), v1::Job::PENDING);
  EXPECT_THAT(w1.channel->Of(Msg::kCheckpoint), SizeIs(0)) << "no victim for a job behind the head";
  ASSERT_TRUE(manager_->Cancel(head, "").ok());

  // Now the second job is the head and preempts l; it is cancelled during l's grace:
  // the eviction is called off and l trains on.
  EXPECT_THAT(w1.channel->Of(Msg::kCheckpoint), SizeIs(1));
  EXPECT_THAT(Job(second).pending_reason(), HasSubstr("preempting " + l));
  ASSERT_TRUE(manager_->Cancel(second, "").ok());
  Pass(absl::Seconds(1), {w1});
  EXPECT_THAT(Logs(l), ::testing::Contains(HasSubstr("called off, " + second + " no longer waits for it")));
  SaveCheckpoint(w1, l, 1, 6, /*requested=*/true);
  Pass(absl::Seconds(130), {w1});
  EXPECT_EQ(Job(l).state(), v1::Job::RUNNING);
  EXPECT_THAT(w1.channel->Of(Msg::kCancel), SizeIs(0));
  EXPECT_EQ(Job(l).preemptions(), 0);
}

TEST_F(JobSharingTest, DrainMovesTheJobThroughACheckpointAndTheCordonOutlivesARestart) {
  Conn w1 = Connect("w1", 1);
  Conn w2 = Connect("w2", 1);
  EXPECT_EQ(manager_->Cordon("w9", true, "").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(manager_->Drain("w9", "").status().code(), absl::StatusCode::kNotFound);

  ASSERT_TRUE(manager_->Cordon("w2", true, "disk").ok());
  const std::string id = Submit(Checkpointed(1, 0));
  ASSERT_EQ(Job(id).placement().ranks(0).worker(), "w1") << "a cordoned worker takes no new ranks";
  auto uncordoned = manager_->Cordon("w2", false, "");
  ASSERT_TRUE(uncordoned.ok());
  EXPECT_FALSE(uncordoned->cordoned());
  Report(w1, id, 1, {0}, v1::RankState::RUNNING);

  auto drained = manager_->Drain("w1", "kernel update");
  ASSERT_TRUE(drained.ok()) << drained.status();
  EXPECT_THAT(drained->job_ids(), ::testing::ElementsAre(id));
  EXPECT_TRUE(drained->worker().cordoned());
  EXPECT_EQ(drained->worker().cordon_reason(), "kernel update");
  ASSERT_THAT(w1.channel->Of(Msg::kCheckpoint), SizeIs(1));
  SaveCheckpoint(w1, id, 1, 8, true);
  EXPECT_EQ(LastReason(id, v1::Job::RESTARTING), "drained from w1: kernel update");
  Report(w1, id, 1, {0}, v1::RankState::KILLED);
  v1::Job job = Job(id);
  ASSERT_EQ(job.state(), v1::Job::SCHEDULED);
  EXPECT_EQ(job.placement().ranks(0).worker(), "w2");
  EXPECT_EQ(w2.channel->Of(Msg::kAssign).back().assign().resume_path(), "/ckpt/job-1/step-00000008-attempt-1");
  EXPECT_EQ(job.preemptions(), 1);
  EXPECT_EQ(job.preempt_times_size(), 0) << "a drain is not counted against the preemption cap";

  Restart();
  Conn back1 = Connect("w1", 1);
  v1::RunningAttempt still;  // the moved job runs on there
  still.set_job_id(id);
  still.set_attempt(2);
  still.add_ranks(0);
  Connect("w2", 1, {still});
  bool cordoned = false;
  for (const auto& w : manager_->Workers()) {
    if (w.name() == "w1") cordoned = w.cordoned() && w.cordon_reason() == "kernel update";
  }
  EXPECT_TRUE(cordoned);
  const std::string next = Submit(Checkpointed(1, 0));
  EXPECT_EQ(Job(next).state(), v1::Job::PENDING) << "w1 still cordoned, w2 busy";
  EXPECT_THAT(Job(next).pending_reason(), HasSubstr("w1: cordoned"));
  ASSERT_TRUE(manager_->Cordon("w1", false, "").ok());
  EXPECT_EQ(Job(next).state(), v1::Job::SCHEDULED);
  EXPECT_EQ(Job(next).placement().ranks(0).worker(), "w1");
  (void)back1;
}

TEST_F(JobSharingTest, APreemptedJobKeepsItsRestartsAndReasonAcrossAControllerRestart) {
  Conn w1 = Connect("w1", 1);
  const std::string low = Submit(Checkpointed(1, 0, /*max_restarts=*/1), "bob");
  Report(w1, low, 1, {0}, v1::RankState::RUNNING);
  const std::string urgent = Submit(Checkpointed(1, 2), "alice");
  SaveCheckpoint(w1, low, 1, 4, true);
  Report(w1, low, 1, {0}, v1::RankState::KILLED);
  ASSERT_EQ(Job(urgent).state(), v1::Job::SCHEDULED);
  const std::string reason = Job(low).pending_reason();

  Restart();
  EXPECT_EQ(Job(low).pending_reason().rfind("preempted by job-2 (priority 2); ", 0), 0u)
      << Job(low).pending_reason() << " / was " << reason;
  Conn back = Connect("w1", 1, {});
  EXPECT_EQ(Job(low).preemptions(), 1);
  // The urgent job's ranks are gone after the restart: its worker did not report them.
  Pass(absl::Seconds(1), {back});
  Pass(absl::Seconds(1), {back});
  ASSERT_EQ(Job(low).state(), v1::Job::SCHEDULED) << Job(low).pending_reason() << " / was " << reason;
  // A failure now uses its one restart; the preemption used none.
  Report(back, low, Job(low).attempt(), {0}, v1::RankState::FAILED, "exit code 1");
  EXPECT_EQ(Job(low).state(), v1::Job::SCHEDULED);
}

}  // namespace
}  // namespace trainyard::testing
