// Controller restarts: a second JobManager built over the same data directory (a new
// SqliteJobStore, hub and manager) recovers the jobs, their states and seqs, waits for the
// placement's workers, and finishes transitions a crash cut off.
#include <gmock/gmock.h>
#include <google/protobuf/util/message_differencer.h>
#include <gtest/gtest.h>

#include "tests/server/state/manager_fixture.h"

namespace trainyard::testing {
namespace {

using ::testing::ElementsAre;
using Msg = v1::ControllerMessage;

class JobRecoveryTest : public ManagerFixture {};

v1::Event Step(const std::string& job, int attempt, int rank, int64_t source_seq) {
  v1::Event e;
  e.set_job_id(job);
  e.set_attempt(attempt);
  e.set_rank(rank);
  e.set_source_seq(source_seq);
  e.mutable_step_metrics()->set_step(source_seq);
  return e;
}

TEST_F(JobRecoveryTest, ASecondManagerSeesTheSameJobsStatesAndSeqs) {
  Conn w1 = Connect("w1", 3);
  const std::string running = Submit(Spec(2));  // rendezvous port 40000
  Report(w1, running, 1, {0, 1}, v1::RankState::RUNNING);
  v1::EventBatch steps;
  *steps.add_events() = Step(running, 1, 0, 101);
  *steps.add_events() = Step(running, 1, 0, 102);
  ASSERT_TRUE(manager_->IngestEvents(w1.id, steps).ok());
  const std::string done = Submit(Spec(1));
  Report(w1, done, 1, {0}, v1::RankState::RUNNING);
  Report(w1, done, 1, {0}, v1::RankState::EXITED);
  const std::string waiting = Submit(Spec(2));
  const v1::Job done_before = Job(done);
  const v1::Job running_before = Job(running);
  ASSERT_EQ(done_before.state(), v1::Job::SUCCEEDED);
  ASSERT_EQ(running_before.state(), v1::Job::RUNNING);
  ASSERT_EQ(running_before.last_seq(), 7);  // PENDING SCHEDULED 2×RUNNING RUNNING 2×step
  ASSERT_EQ(Job(waiting).state(), v1::Job::PENDING);

  Restart();
  using google::protobuf::util::MessageDifferencer;
  EXPECT_TRUE(MessageDifferencer::Equals(Job(done), done_before)) << Job(done).DebugString();
  EXPECT_TRUE(MessageDifferencer::Equals(Job(running), running_before))
      << Job(running).DebugString() << "\nbefore:\n" << running_before.DebugString();
  EXPECT_TRUE(hub_->IsSettled(done));
  EXPECT_FALSE(hub_->IsSettled(running));
  EXPECT_EQ(Job(waiting).pending_reason(), "needs 2 slots; no workers connected");
  auto workers = manager_->Workers();
  ASSERT_EQ(workers.size(), 1u);
  EXPECT_EQ(workers[0].name(), "w1");
  EXPECT_FALSE(workers[0].connected()) << "expected back within the heartbeat timeout";

  // The worker reconnects (now with 4 slots) still running the attempt: the attempt is
  // kept, its 2 slots and its rendezvous port stay held, the other 2 slots are used.
  v1::RunningAttempt kept;
  kept.set_job_id(running);
  kept.set_attempt(1);
  Conn back = Connect("w1", 4, {kept});
  EXPECT_THAT(back.channel->Of(Msg::kCancel), ::testing::IsEmpty());
  EXPECT_EQ(Job(running).state(), v1::Job::RUNNING);
  EXPECT_EQ(Job(waiting).state(), v1::Job::SCHEDULED);
  EXPECT_EQ(Job(waiting).placement().master_port(), 40001)
      << "port 40000 belongs to the recovered gang";
  // It resends what was not acknowledged (dropped) and goes on; seqs continue.
  ASSERT_TRUE(manager_->IngestEvents(back.id, steps).ok());
  EXPECT_EQ(Job(running).last_seq(), 7);
  Report(back, running, 1, {0, 1}, v1::RankState::EXITED);
  EXPECT_EQ(Job(running).state(), v1::Job::SUCCEEDED);
  auto events = Stored(running);
  ASSERT_EQ(events.size(), 10u);
  for (size_t i = 0; i < events.size(); ++i) EXPECT_EQ(events[i].seq(), int64_t(i) + 1);
  for (const auto& w : manager_->Workers()) EXPECT_EQ(w.free_slots(), 2);
}

TEST_F(JobRecoveryTest, TransitionsTheCrashCutOffHappenOnRecovery) {
  Conn w1 = Connect("w1", 2);
  const std::string id = Submit(Spec(2));
  Report(w1, id, 1, {0, 1}, v1::RankState::RUNNING);
  // The ranks' exits were committed, then the controller died before SUCCEEDED was.
  v1::Event exited;
  exited.set_attempt(1);
  exited.mutable_rank_state()->set_state(v1::RankState::EXITED);
  exited.mutable_rank_state()->set_worker("w1");
  std::vector<v1::Event> exits(2, exited);
  exits[0].set_rank(0);
  exits[0].set_source_seq(100);
  exits[1].set_rank(1);
  exits[1].set_source_seq(100);
  ASSERT_TRUE(db_->AppendEvents(id, exits).ok());

  Restart();
  EXPECT_EQ(Job(id).state(), v1::Job::SUCCEEDED);
  EXPECT_EQ(StoredJob(id).state(), v1::Job::SUCCEEDED);
  EXPECT_THAT(StoredStates(id), ElementsAre(v1::Job::PENDING, v1::Job::SCHEDULED,
                                            v1::Job::RUNNING, v1::Job::SUCCEEDED));
  EXPECT_TRUE(hub_->IsSettled(id));
}

// The controller was killed while a job ran; its rank exited 0 during the outage. The
// worker re-registers reporting the attempt as ended (its final state is still in the
// outbox) and resends what was not acknowledged: the job succeeds from those events
// with every step stored once, and whatever arrives after that is dropped, not
// appended (it once went FAILED "is gone", then got 1,200 steps after FAILED).
TEST_F(JobRecoveryTest, AnAttemptThatEndedWhileTheControllerWasDownSucceedsFromItsResentEvents) {
  Conn w1 = Connect("w1", 1);
  const std::string id = Submit(Spec(1));
  Report(w1, id, 1, {0}, v1::RankState::RUNNING);
  v1::EventBatch before;
  *before.add_events() = Step(id, 1, 0, 101);
  ASSERT_TRUE(manager_->IngestEvents(w1.id, before).ok());

  Restart();
  v1::RunningAttempt ended;
  ended.set_job_id(id);
  ended.set_attempt(1);
  ended.add_ranks(0);
  ended.set_ended(true);
  Conn back = Connect("w1", 1, {ended});
  EXPECT_THAT(back.channel->Of(Msg::kCancel), ::testing::IsEmpty()) << "nothing runs to cancel";
  EXPECT_EQ(Job(id).state(), v1::Job::RUNNING) << Job(id).failure_reason();

  // The outbox's resend: the acknowledged step again, the steps and the exit that the
  // outage held back.
  v1::EventBatch resent = before;
  *resent.add_events() = Step(id, 1, 0, 102);
  *resent.add_events() = Step(id, 1, 0, 103);
  v1::EventBatch exit_batch = RankStates(back, id, 1, {0}, v1::RankState::EXITED, "");
  for (const auto& e : exit_batch.events()) *resent.add_events() = e;
  ASSERT_TRUE(manager_->IngestEvents(back.id, resent).ok());
  EXPECT_EQ(Job(id).state(), v1::Job::SUCCEEDED);
  EXPECT_TRUE(hub_->IsSettled(id));
  const int64_t last = Job(id).last_seq();

  // The same batch once more (a second reconnect), and an event never seen before: the
  // stream is closed, nothing is appended after the terminal state.
  ASSERT_TRUE(manager_->IngestEvents(back.id, resent).ok());
  v1::EventBatch late;
  *late.add_events() = Step(id, 1, 0, 104);
  ASSERT_TRUE(manager_->IngestEvents(back.id, late).ok());
  EXPECT_EQ(Job(id).last_seq(), last);
  std::vector<int64_t> steps;
  for (const auto& e : Stored(id)) {
    if (e.has_step_metrics()) steps.push_back(e.step_metrics().step());
  }
  EXPECT_THAT(steps, ElementsAre(101, 102, 103));
  EXPECT_EQ(Stored(id).back().job_state().state(), v1::Job::SUCCEEDED) << "the terminal state is the last event";
  EXPECT_EQ(manager_->Workers()[0].free_slots(), 1);
}

TEST_F(JobRecoveryTest, ARestartingJobIsNotFailedTwiceAndWaitsForSlots) {
  Conn w1 = Connect("w1", 1);
  Conn w2 = Connect("w2", 1);
  const std::string id = Submit(Spec(2, 1, /*max_restarts=*/2));
  Report(w1, id, 1, {0}, v1::RankState::FAILED, "boom");
  ASSERT_EQ(Job(id).state(), v1::Job::RESTARTING);

  Restart();
  EXPECT_EQ(Job(id).state(), v1::Job::RESTARTING);
  // w2 comes back running nothing: rank 1 is gone, the attempt is over (and counted
  // once), and the job backs off (from the stored failure) then waits for slots (w1
  // has not come back).
  Connect("w2", 1);
  EXPECT_EQ(Job(id).state(), v1::Job::PENDING) << "rank 1 is gone from w2";
  EXPECT_EQ(Job(id).pending_reason(), "restarting: backing off until 2023-11-14T22:13:21Z (restart 1 of 2)");
  clock_.Advance(absl::Seconds(1));
  manager_->Tick();
  EXPECT_EQ(Job(id).attempt(), 1);
  int restarting = 0;
  for (auto s : StoredStates(id)) restarting += s == v1::Job::RESTARTING;
  EXPECT_EQ(restarting, 1);
  EXPECT_EQ(Job(id).pending_reason(), "needs 2 slots; 1 free: w2=1; the connected workers are too few for it even when idle");
}

TEST_F(JobRecoveryTest, AWorkerThatNeverComesBackIsLostAfterTheTimeout) {
  Conn w1 = Connect("w1", 1);
  const std::string id = Submit(Spec(1));
  Report(w1, id, 1, {0}, v1::RankState::RUNNING);
  Restart();
  EXPECT_EQ(Job(id).state(), v1::Job::RUNNING);
  clock_.Advance(absl::Seconds(15));
  manager_->Tick();
  EXPECT_EQ(Job(id).state(), v1::Job::RUNNING);
  clock_.Advance(absl::Seconds(1));
  manager_->Tick();
  EXPECT_EQ(Job(id).state(), v1::Job::FAILED);
  EXPECT_EQ(Job(id).failure_reason(), "worker w1 lost (disconnected for 16s) running rank 0");
  EXPECT_TRUE(hub_->IsSettled(id));
}

}  // namespace
}  // namespace trainyard::testing
