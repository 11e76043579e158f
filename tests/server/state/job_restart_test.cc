// Fault tolerance through JobManager (fake clock, fake worker channels, real SqliteJobStore):
// events of stale and forged attempts, checkpoints recorded and resumed from, refused
// checkpoint events, the restart backoff, failure causes, worker avoidance, elastic
// shrink, and what a controller restart keeps.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "common/events/rank_exit.h"
#include "tests/server/state/manager_fixture.h"

namespace trainyard::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;
using Msg = v1::ControllerMessage;

class JobRestartTest : public ManagerFixture {
 protected:
  v1::Event Base(const std::string& job, int attempt, int rank) {
    v1::Event e;
    e.set_job_id(job);
    e.set_attempt(attempt);
    e.set_rank(rank);
    e.set_source_seq(++source_seq_[{job, attempt, rank}]);
    return e;
  }
  v1::Event Ckpt(const std::string& job, int attempt, int rank, int64_t step, const std::string& path) {
    v1::Event e = Base(job, attempt, rank);
    auto* ck = e.mutable_checkpoint();
    ck->set_step(step);
    ck->set_path(path);
    ck->set_bytes(4096);
    ck->set_blocked_ms(1.5);
    ck->set_write_ms(20);
    ck->set_dp(2);
    ck->set_tp(1);
    ck->set_ep(1);
    return e;
  }
  v1::Event Step(const std::string& job, int attempt, int rank, int64_t step) {
    v1::Event e = Base(job, attempt, rank);
    e.mutable_step_metrics()->set_step(step);
    return e;
  }
  int StoredCount(const std::string& id, v1::Event::PayloadCase kind) {
    int n = 0;
    for (const auto& e : Stored(id)) n += e.payload_case() == kind;
    return n;
  }
};

TEST_F(JobRestartTest, EventsOfStaleForgedOrMisplacedAttemptsAreDroppedAndTheBatchStillAcked) {
  Conn w1 = Connect("w1", 2);
  Conn w2 = Connect("w2", 1);
  v1::JobSpec spec = Spec(2, 1, /*max_restarts=*/1);
  spec.mutable_restart()->set_backoff_s(0);
  const std::string id = Submit(spec);
  ASSERT_EQ(Job(id).placement().ranks(1).worker(), "w1");
  const int64_t seq_before = Job(id).last_seq();
  // A future attempt, a rank placed on w1 claimed by w2, a rank outside the world:
  // forged. The one real event in the same batch is stored, and the call succeeds.
  v1::Event future = Base(id, 2, 0);
  future.mutable_rank_state()->set_state(v1::RankState::FAILED);
  Send(w1, {future, Step(id, 1, 5, 1), Step(id, 1, 0, 1)});
  v1::Event misplaced = Base(id, 1, 1);
  misplaced.mutable_rank_state()->set_state(v1::RankState::FAILED);
  Send(w2, {misplaced});
  EXPECT_EQ(Dropped("forged"), 3);
  EXPECT_EQ(Job(id).state(), v1::Job::SCHEDULED) << "no forged failure acted on";
  EXPECT_EQ(Job(id).last_seq(), seq_before + 1);
  EXPECT_EQ(StoredCount(id, v1::Event::kRankState), 0);

  // Attempt 1 fails and attempt 2 starts: attempt 1's late events (a rank that outlived
  // its cancel, a worker resending after a reconnect) are stale, not stored.
  Report(w1, id, 1, {0}, v1::RankState::FAILED, "exit code 1");
  Report(w1, id, 1, {1}, v1::RankState::KILLED, "teardown");  // before attempt 2: kept
  ASSERT_EQ(Job(id).attempt(), 2);
  const int64_t seq_attempt2 = Job(id).last_seq();
  Send(w1, {Step(id, 1, 0, 2), Ckpt(id, 1, 0, 5, "/x")});
  Report(w1, id, 1, {1}, v1::RankState::FAILED, "late");
  EXPECT_EQ(Dropped("stale_attempt"), 3);
  EXPECT_EQ(Job(id).last_seq(), seq_attempt2);
  EXPECT_EQ(Job(id).state(), v1::Job::SCHEDULED);
  EXPECT_EQ(Job(id).failure_causes_size(), 1);

  // A job never placed has no attempt to report for.
  const std::string waiting = Submit(Spec(3));
  ASSERT_EQ(Job(waiting).attempt(), 0);
  const int64_t waiting_seq = Job(waiting).last_seq();
  Send(w1, {Step(waiting, 1, 0, 1)});
  EXPECT_EQ(Dropped("forged"), 4);
  EXPECT_EQ(Job(waiting).last_seq(), waiting_seq);
}

TEST_F(JobRestartTest, OutOfRangeOrForeignCheckpointsAreRefusedAndTheNewestIsRecorded) {
  Conn w1 = Connect("w1", 2);
  v1::JobSpec spec = Spec(2, 1, /*max_restarts=*/1);
  spec.mutable_training()->set_steps(10);
  spec.mutable_checkpoint()->set_dir("/ckpt/");
  spec.mutable_restart()->set_backoff_s(0);
  const std::string id = Submit(spec);
  ASSERT_EQ(id, "job-1");
  // Field ranges (request_validation): refused whatever the job.
  v1::Event negative = Ckpt(id, 1, 0, 2, "/ckpt/job-1/a");
  negative.mutable_checkpoint()->set_bytes(-1);
  v1::Event nan = Ckpt(id, 1, 0, 2, "/ckpt/job-1/a");
  nan.mutable_checkpoint()->set_write_ms(std::numeric_limits<double>::quiet_NaN());
  v1::Event no_dp = Ckpt(id, 1, 0, 2, "/ckpt/job-1/a");
  no_dp.mutable_checkpoint()->set_dp(0);
  v1::Event huge = Ckpt(id, 1, 0, 2, "/ckpt/job-1/" + std::string(5000, 'p'));
  v1::Event not_utf8 = Ckpt(id, 1, 0, 2, "/ckpt/job-1/\xff\xfe");
  Send(w1, {negative, nan, no_dp, huge, not_utf8, Ckpt(id, 1, 0, 0, "/ckpt/job-1/a")});
  EXPECT_EQ(Dropped("invalid"), 6);
  // Against the job: past training.steps, another job's directory, an escape, the
  // directory itself, rank 1.
  Send(w1, {Ckpt(id, 1, 0, 11, "/ckpt/job-1/s11"), Ckpt(id, 1, 0, 3, "/ckpt/job-2/s3"),
            Ckpt(id, 1, 0, 3, "/ckpt/job-1/../job-2/s3"), Ckpt(id, 1, 0, 3, "/ckpt/job-1"),
            Ckpt(id, 1, 0, 3, "/ckpt/job-10/s3"), Ckpt(id, 1, 1, 3, "/ckpt/job-1/step-00000003-attempt-1"),
            Ckpt(id, 1, 0, 3, "/ckpt/job-1/step-00000004-attempt-1"), Ckpt(id, 1, 0, 3, "/ckpt/job-1/step-00000003-attempt-2"),
            Ckpt(id, 1, 0, 3, "/ckpt/job-1/step-00000003-attempt-1/x")});
  EXPECT_EQ(Dropped("bad_checkpoint"), 9);
  EXPECT_FALSE(Job(id).has_last_checkpoint());
  EXPECT_EQ(StoredCount(id, v1::Event::kCheckpoint), 0);

  // In one batch, 7 then 6: 6 is not newer. Then 3 is refused; a resend of 7 is a
  // repeat the store drops.
  v1::Event seven = Ckpt(id, 1, 0, 7, "/ckpt/job-1/step-00000007-attempt-1");
  Send(w1, {Ckpt(id, 1, 0, 5, "/ckpt/job-1/step-00000005-attempt-1"), seven, Ckpt(id, 1, 0, 6, "/ckpt/job-1/step-00000006-attempt-1")});
  Send(w1, {Ckpt(id, 1, 0, 3, "/ckpt/job-1/step-00000003-attempt-1")});
  Send(w1, {seven});
  EXPECT_EQ(Dropped("bad_checkpoint"), 11);
  EXPECT_EQ(StoredCount(id, v1::Event::kCheckpoint), 2);
  v1::Job job = Job(id);
  EXPECT_EQ(job.last_checkpoint().step(), 7);
  EXPECT_EQ(job.last_checkpoint().path(), "/ckpt/job-1/step-00000007-attempt-1");
  EXPECT_EQ(job.last_checkpoint().attempt(), 1);
  EXPECT_EQ(job.last_checkpoint().bytes(), 4096);
  EXPECT_EQ(StoredJob(id).last_checkpoint().step(), 7) << "stored with the job row";

  // The next attempt resumes from it.
  Report(w1, id, 1, {1}, v1::RankState::FAILED, "exit code 1");
  Report(w1, id, 1, {0}, v1::RankState::KILLED);
  auto assigns = w1.channel->Of(Msg::kAssign);
  ASSERT_EQ(assigns.size(), 2u);
  EXPECT_EQ(assigns[0].assign().resume_path(), "");
  EXPECT_EQ(assigns[1].assign().attempt(), 2);
  EXPECT_EQ(assigns[1].assign().resume_path(), "/ckpt/job-1/step-00000007-attempt-1");
  EXPECT_EQ(assigns[1].assign().checkpoint_dir(), "/ckpt/job-1")
      << "checkpoint.interval is 0, but a requested checkpoint needs the directory";

  // A controller restart keeps the checkpoint and the cause; attempt 2 moves it on.
  Restart();
  EXPECT_EQ(Job(id).last_checkpoint().step(), 7);
  EXPECT_THAT(Job(id).failure_causes(), ElementsAre("rank 1 on worker w1 failed: exit code 1"));
  v1::RunningAttempt kept;
  kept.set_job_id(id);
  kept.set_attempt(2);
  Conn back = Connect("w1", 2, {kept});
  Send(back, {Ckpt(id, 2, 0, 9, "/ckpt/job-1/step-00000009-attempt-2")});
  EXPECT_EQ(Job(id).last_checkpoint().step(), 9);
  EXPECT_EQ(Job(id).last_checkpoint().attempt(), 2);
}

// A crash between committing a checkpoint event and writing the job row that records
// it: recovery finds the checkpoint in the stream (the batch was acked, never resent).
TEST_F(JobRestartTest, RecoveryRecordsACheckpointTheJobRowMissed) {
  Conn w1 = Connect("w1", 2);
  v1::JobSpec spec = Spec(2, 1, /*max_restarts=*/1);
  spec.mutable_checkpoint()->set_dir("/ckpt");
  const std::string id = Submit(spec);
  Send(w1, {Ckpt(id, 1, 0, 7, "/ckpt/job-1/step-00000007-attempt-1")});
  ASSERT_EQ(StoredJob(id).last_checkpoint().step(), 7);
  v1::Job row = StoredJob(id);
  row.clear_last_checkpoint();
  ASSERT_TRUE(db_->PutJob(row).ok());
  Restart();
  EXPECT_EQ(Job(id).last_checkpoint().step(), 7);
  EXPECT_EQ(Job(id).last_checkpoint().path(), "/ckpt/job-1/step-00000007-attempt-1");
  EXPECT_EQ(StoredJob(id).last_checkpoint().step(), 7) << "the row is healed";
}

TEST_F(JobRestartTest, BackoffDoublesPerRestartAndHoldsThePlacementUntilItsDeadline) {
  Conn w1 = Connect("w1", 1);
  v1::JobSpec spec = Spec(1, 1, /*max_restarts=*/3);
  spec.mutable_restart()->set_backoff_s(2);
  const std::string id = Submit(spec);
  Report(w1, id, 1, {0}, v1::RankState::FAILED, "exit code 1");
  EXPECT_EQ(Job(id).pending_reason(), "restarting: backing off until 2023-11-14T22:13:22Z (restart 1 of 3)");
  // A job backing off holds nobody back: a later one takes the free slot meanwhile.
  const std::string other = Submit(Spec(1));
  EXPECT_EQ(Job(other).state(), v1::Job::SCHEDULED);
  Report(w1, other, 1, {0}, v1::RankState::EXITED);
  Pass(absl::Milliseconds(1999), {w1});
  EXPECT_EQ(Job(id).state(), v1::Job::PENDING);
  EXPECT_EQ(w1.channel->Of(Msg::kAssign).size(), 2u);
  Pass(absl::Milliseconds(1), {w1});
  EXPECT_EQ(Job(id).state(), v1::Job::SCHEDULED);
  EXPECT_EQ(Job(id).attempt(), 2);

  // Restart 2 waits 4 s from its failure.
  Report(w1, id, 2, {0}, v1::RankState::FAILED, "exit code 1");
  EXPECT_EQ(Job(id).pending_reason(), "restarting: backing off until 2023-11-14T22:13:26Z (restart 2 of 3)");
  Pass(absl::Milliseconds(3999), {w1});
  EXPECT_EQ(Job(id).state(), v1::Job::PENDING);
  Pass(absl::Milliseconds(1), {w1});
  ASSERT_EQ(Job(id).state(), v1::Job::SCHEDULED);
  // w1 is the only worker: avoided after two failures, but no placement exists without it.
  EXPECT_EQ(LastReason(id, v1::Job::SCHEDULED),
            "placed on w1×1 (on w1 (2 failures) although this job failed there: no placement without it)");

  // Restart 3 waits 8 s; a controller restart in between keeps the deadline.
  Report(w1, id, 3, {0}, v1::RankState::FAILED, "exit code 1");
  Restart();
  EXPECT_EQ(Job(id).pending_reason(), "restarting: backing off until 2023-11-14T22:13:34Z (restart 3 of 3)");
  Conn back = Connect("w1", 1);
  Pass(absl::Milliseconds(7999), {back});
  EXPECT_EQ(Job(id).state(), v1::Job::PENDING);
  Pass(absl::Milliseconds(1), {back});
  EXPECT_EQ(Job(id).state(), v1::Job::SCHEDULED);
  EXPECT_EQ(Job(id).attempt(), 4);
}

TEST_F(JobRestartTest, ExhaustedRestartsFailListingEveryCauseAndARepeatOffenderWorkerIsAvoided) {
  Conn w1 = Connect("w1", 1);
  Conn w2 = Connect("w2", 1);
  Conn w3 = Connect("w3", 1);
  v1::JobSpec spec = Spec(1, 1, /*max_restarts=*/2);
  spec.mutable_restart()->set_backoff_s(0);
  const std::string id = Submit(spec);
  ASSERT_EQ(Job(id).placement().ranks(0).worker(), "w1");
  // 1: the rank fails with a 5,000-character message (its stderr tail).
  Report(w1, id, 1, {0}, v1::RankState::FAILED, "exit code 1: " + std::string(5000, 'e'));
  ASSERT_EQ(Job(id).attempt(), 2);
  ASSERT_EQ(Job(id).placement().ranks(0).worker(), "w1") << "one failure is not enough to avoid w1";
  // 2: a stall on w1; w1 has now failed the job twice.
  v1::Event stall = Base(id, 2, 0);
  stall.mutable_stall()->set_collective("allreduce");
  stall.mutable_stall()->set_collective_seq(42);
  stall.mutable_stall()->set_lagging_rank(0);
  stall.mutable_stall()->set_waited_s(300);
  stall.mutable_stall()->set_message("rank 0 behind");
  Send(w1, {stall});
  EXPECT_EQ(Job(id).state(), v1::Job::RESTARTING);
  Report(w1, id, 2, {0}, v1::RankState::KILLED);
  ASSERT_EQ(Job(id).attempt(), 3);
  EXPECT_EQ(Job(id).placement().ranks(0).worker(), "w2");
  EXPECT_EQ(LastReason(id, v1::Job::SCHEDULED),
            "placed on w2×1 (avoiding w1 (2 failures), where this job failed before)");
  // 3: w2 is lost.
  manager_->StreamClosed(w2.id);
  Pass(absl::Seconds(16), {w1, w3});
  const v1::Job job = Job(id);
  ASSERT_EQ(job.state(), v1::Job::FAILED);
  ASSERT_THAT(job.failure_causes(), SizeIs(3));
  EXPECT_EQ(job.failure_causes(0).size(), 200u);
  EXPECT_THAT(job.failure_causes(0), ::testing::StartsWith("rank 0 on worker w1 failed: exit code 1: eee"));
  EXPECT_THAT(job.failure_causes(0), ::testing::EndsWith("eee..."));
  EXPECT_EQ(job.failure_causes(1), "rank 0 stalled in allreduce #42 for 300 s waiting for rank 0: rank 0 behind");
  EXPECT_EQ(job.failure_causes(2), "worker w2 lost (disconnected for 16s) running rank 0");
  EXPECT_EQ(job.failure_reason(), "failed 3 attempts (restart.max_restarts=2): attempt 1: " + job.failure_causes(0) +
                                      " | attempt 2: " + job.failure_causes(1) + " | attempt 3: " +
                                      job.failure_causes(2));
  EXPECT_LT(job.failure_reason().size(), 1000u);

  Restart();
  EXPECT_EQ(Job(id).failure_reason(), job.failure_reason());
  EXPECT_THAT(Job(id).failure_causes(), ElementsAre(job.failure_causes(0), job.failure_causes(1),
                                                    job.failure_causes(2)));
}

TEST_F(JobRestartTest, ElasticShrinkKeepsTheGlobalBatchAndTheNextRestartGrowsBack) {
  Conn w1 = Connect("w1", 2);
  Conn w2 = Connect("w2", 2);
  v1::JobSpec spec = Spec(4, 1, /*max_restarts=*/3);
  spec.mutable_parallelism()->set_ep(4);
  spec.mutable_restart()->set_backoff_s(0);
  spec.mutable_restart()->set_min_dp(1);
  spec.mutable_restart()->set_elastic_wait_s(30);
  const std::string id = Submit(spec);
  ASSERT_EQ(Job(id).world_size(), 4);
  manager_->StreamClosed(w2.id);
  Pass(absl::Seconds(16), {w1});
  Report(w1, id, 1, {0, 1}, v1::RankState::KILLED);
  v1::Job job = Job(id);
  ASSERT_EQ(job.state(), v1::Job::PENDING);
  EXPECT_EQ(job.pending_reason(),
            "needs 4 slots; 2 free: w1=2; the connected workers are too few for it even when idle; elastic: may "
            "restart at dp >= 1 from 2023-11-14T22:14:06Z");
  Pass(absl::Seconds(29), {w1});
  EXPECT_EQ(Job(id).state(), v1::Job::PENDING);
  Pass(absl::Seconds(1), {w1});
  job = Job(id);
  ASSERT_EQ(job.state(), v1::Job::SCHEDULED);
  EXPECT_EQ(job.world_size(), 2);
  EXPECT_EQ(job.spec().parallelism().dp(), 4) << "the job keeps its submitted spec";
  EXPECT_EQ(LastReason(id, v1::Job::SCHEDULED),
            "placed on w1×2 (elastic: dp=2 of 4, grad_accum_steps=2, ep=2, after 30 s without slots for dp=4)");
  auto assigns = w1.channel->Of(Msg::kAssign);
  ASSERT_EQ(assigns.size(), 2u);
  const v1::Assign& a = assigns[1].assign();
  EXPECT_EQ(a.world_size(), 2);
  EXPECT_EQ(a.spec().parallelism().dp(), 2);
  EXPECT_EQ(a.spec().parallelism().ep(), 2);
  EXPECT_EQ(a.spec().training().grad_accum_steps(), 2);
  EXPECT_EQ(a.spec().training().batch_size(), job.spec().training().batch_size()) << "per DP rank, unchanged";

  // The slots come back; the next restart tries the full dp first and gets it.
  Conn w2b = Connect("w2", 2);
  Report(w1, id, 2, {1}, v1::RankState::FAILED, "exit code 1");
  Report(w1, id, 2, {0}, v1::RankState::KILLED);
  job = Job(id);
  ASSERT_EQ(job.state(), v1::Job::SCHEDULED);
  EXPECT_EQ(job.world_size(), 4);
  ASSERT_EQ(w2b.channel->Of(Msg::kAssign).size(), 1u);
  EXPECT_EQ(w2b.channel->Of(Msg::kAssign)[0].assign().spec().parallelism().dp(), 4);
  EXPECT_EQ(LastReason(id, v1::Job::SCHEDULED), "placed on w1×2, w2×2");
}

// A rank that exits with kRankExitInputError (its dataset or initial weights are wrong)
// fails the job at once: restarts left unused, no worker blamed, nothing re-placed.
// Exit code 1 with the same spec restarts as before.
TEST_F(JobRestartTest, AnInputErrorFailsTheJobWithoutSpendingRestarts) {
  Conn w1 = Connect("w1", 2);
  v1::JobSpec spec = Spec(2, 1, /*max_restarts=*/3);
  spec.mutable_restart()->set_backoff_s(0);
  const std::string id = Submit(spec);
  v1::EventBatch batch = RankStates(w1, id, 1, {1}, v1::RankState::FAILED,
                                    "exit code 87: dataset \"tokens\" (/d/a.idx): bad magic at offset 0");
  batch.mutable_events(0)->mutable_rank_state()->set_exit_code(kRankExitInputError);
  ASSERT_TRUE(manager_->IngestEvents(w1.id, batch).ok());
  Report(w1, id, 1, {0}, v1::RankState::KILLED);
  const v1::Job job = Job(id);
  EXPECT_EQ(job.state(), v1::Job::FAILED);
  EXPECT_EQ(job.attempt(), 1);
  EXPECT_THAT(job.failure_reason(), HasSubstr("bad magic at offset 0"));
  EXPECT_THAT(job.failure_reason(), HasSubstr("permanent: the job's inputs are wrong"));
  EXPECT_THAT(job.failure_reason(), HasSubstr("restarts left unused"));
  EXPECT_EQ(w1.channel->Of(Msg::kAssign).size(), 1u) << "never re-placed";

  // The same failure with exit code 1 (or a signal) is transient: it restarts.
  const std::string other = Submit(spec);
  v1::EventBatch transient = RankStates(w1, other, 1, {1}, v1::RankState::FAILED, "exit code 1");
  transient.mutable_events(0)->mutable_rank_state()->set_exit_code(kRankExitError);
  ASSERT_TRUE(manager_->IngestEvents(w1.id, transient).ok());
  Report(w1, other, 1, {0}, v1::RankState::KILLED);
  manager_->Tick();
  EXPECT_EQ(Job(other).attempt(), 2);
}

}  // namespace
}  // namespace trainyard::testing
