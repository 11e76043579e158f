// The job lifecycle through JobManager, with fake worker channels, a fake clock and a
// real SqliteJobStore: placement and Assign messages, the state machine, restarts, cancel,
// lost workers, event commit and resend deduplication, admission errors.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/server/state/manager_fixture.h"

namespace trainyard::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using State = v1::Job::State;
using Msg = v1::ControllerMessage;

class JobLifecycleTest : public ManagerFixture {};

std::vector<int> Ranks(const v1::ControllerMessage& m) {
  return std::vector<int>(m.assign().ranks().begin(), m.assign().ranks().end());
}

TEST_F(JobLifecycleTest, SubmitIsScheduledRunsAndSucceeds) {
  Conn w1 = Connect("w1", 2);
  Conn w2 = Connect("w2", 1);
  auto submitted = manager_->Submit(Spec(3), "alice");
  ASSERT_TRUE(submitted.ok()) << submitted.status();
  const std::string id = submitted->id();
  // Placed at once: most free worker first, so ranks 0,1 on w1 and rank 2 on w2.
  EXPECT_EQ(submitted->state(), v1::Job::SCHEDULED);
  EXPECT_EQ(submitted->attempt(), 1);
  EXPECT_EQ(submitted->owner(), "alice");
  ASSERT_EQ(submitted->placement().ranks_size(), 3);
  EXPECT_EQ(submitted->placement().ranks(0).worker(), "w1");
  EXPECT_EQ(submitted->placement().ranks(1).worker(), "w1");
  EXPECT_EQ(submitted->placement().ranks(2).worker(), "w2");
  EXPECT_EQ(submitted->placement().master_addr(), "w1.local");
  EXPECT_EQ(submitted->placement().master_port(), 40000);

  auto a1 = w1.channel->Of(Msg::kAssign);
  auto a2 = w2.channel->Of(Msg::kAssign);
  ASSERT_EQ(a1.size(), 1u);
  ASSERT_EQ(a2.size(), 1u);
  EXPECT_EQ(a1[0].assign().job_id(), id);
  EXPECT_EQ(a1[0].assign().attempt(), 1);
  EXPECT_EQ(a1[0].assign().world_size(), 3);
  EXPECT_EQ(Ranks(a1[0]), (std::vector<int>{0, 1}));
  EXPECT_EQ(Ranks(a2[0]), (std::vector<int>{2}));
  EXPECT_EQ(a2[0].assign().master_addr(), "w1.local");
  EXPECT_EQ(a2[0].assign().master_port(), 40000);
  EXPECT_EQ(a1[0].assign().spec().model().dim(), 64) << "the normalised (tiny) spec is sent";
  for (const auto& w : manager_->Workers()) EXPECT_EQ(w.free_slots(), 0) << w.name();

  Report(w1, id, 1, {0, 1}, v1::RankState::RUNNING);
  EXPECT_EQ(Job(id).state(), v1::Job::SCHEDULED) << "rank 2 is not running yet";
  Report(w2, id, 1, {2}, v1::RankState::RUNNING);
  EXPECT_EQ(Job(id).state(), v1::Job::RUNNING);
  EXPECT_TRUE(Job(id).has_start_time());

  Report(w1, id, 1, {0, 1}, v1::RankState::EXITED);
  EXPECT_EQ(Job(id).state(), v1::Job::RUNNING);
  EXPECT_FALSE(hub_->IsSettled(id));
  Report(w2, id, 1, {2}, v1::RankState::EXITED);
  EXPECT_EQ(Job(id).state(), v1::Job::SUCCEEDED);
  EXPECT_TRUE(hub_->IsSettled(id));
  EXPECT_EQ(StoredJob(id).state(), v1::Job::SUCCEEDED);
  EXPECT_THAT(StoredStates(id), ElementsAre(v1::Job::PENDING, v1::Job::SCHEDULED,
                                            v1::Job::RUNNING, v1::Job::SUCCEEDED));
  // 4 job states + 6 rank states, seq 1..10 without a gap.
  auto events = Stored(id);
  ASSERT_EQ(events.size(), 10u);
  for (size_t i = 0; i < events.size(); ++i) EXPECT_EQ(events[i].seq(), int64_t(i) + 1);
  EXPECT_EQ(Job(id).last_seq(), 10);
  for (const auto& w : manager_->Workers()) {
    EXPECT_EQ(w.free_slots(), w.slots()) << w.name() << " got its slots back";
  }
}

TEST_F(JobLifecycleTest, FailedRankRestartsWhileAllowedThenFailsWithTheCause) {
  Conn w1 = Connect("w1", 2);
  const std::string id = Submit(Spec(2, 1, /*max_restarts=*/1));
  Report(w1, id, 1, {0, 1}, v1::RankState::RUNNING);
  Report(w1, id, 1, {1}, v1::RankState::FAILED, "exit code 1: step 3: boom");
  const std::string cause = "rank 1 on worker w1 failed: exit code 1: step 3: boom";
  EXPECT_EQ(Job(id).state(), v1::Job::RESTARTING);
  auto cancels = w1.channel->Of(Msg::kCancel);
  ASSERT_EQ(cancels.size(), 1u);
  EXPECT_EQ(cancels[0].cancel().job_id(), id);
  EXPECT_EQ(cancels[0].cancel().attempt(), 1);
  EXPECT_EQ(cancels[0].cancel().reason(), cause);

  // The last rank of attempt 1 ends: back to PENDING, backing off restart.backoff_s
  // (default 1 s) from the failure, then placed again.
  Report(w1, id, 1, {0}, v1::RankState::KILLED);
  EXPECT_EQ(Job(id).state(), v1::Job::PENDING);
  EXPECT_EQ(Job(id).pending_reason(), "restarting: backing off until 2023-11-14T22:13:21Z (restart 1 of 1)");
  clock_.Advance(absl::Seconds(1));
  manager_->Heartbeat(w1.id, v1::Heartbeat());
  manager_->Tick();
  v1::Job job = Job(id);
  EXPECT_EQ(job.state(), v1::Job::SCHEDULED);
  EXPECT_EQ(job.attempt(), 2);
  EXPECT_EQ(job.placement().master_port(), 40001) << "the port rotates";
  auto assigns = w1.channel->Of(Msg::kAssign);
  ASSERT_EQ(assigns.size(), 2u);
  EXPECT_EQ(assigns[1].assign().attempt(), 2);
  EXPECT_EQ(Ranks(assigns[1]), (std::vector<int>{0, 1}));
  std::string restarting_reason;
  for (const auto& e : Stored(id)) {
    if (e.has_job_state() && e.job_state().state() == v1::Job::RESTARTING) {
      restarting_reason = e.job_state().reason();
    }
  }
  EXPECT_EQ(restarting_reason, cause + "; restart 1 of 1");

  // A late event of attempt 1 does not count for attempt 2 (nor is it stored).
  Report(w1, id, 1, {0}, v1::RankState::RUNNING);
  EXPECT_EQ(Dropped("stale_attempt"), 1);
  Report(w1, id, 2, {1}, v1::RankState::RUNNING);
  EXPECT_EQ(Job(id).state(), v1::Job::SCHEDULED);
  Report(w1, id, 2, {0}, v1::RankState::RUNNING);
  EXPECT_EQ(Job(id).state(), v1::Job::RUNNING);

  // No restart left: the next failure is final and names the cause.
  Report(w1, id, 2, {0}, v1::RankState::FAILED, "oom");
  job = Job(id);
  EXPECT_EQ(job.state(), v1::Job::FAILED);
  EXPECT_EQ(job.failure_reason(),
            "failed 2 attempts (restart.max_restarts=1): attempt 1: " + cause + " | attempt 2: rank 0 on worker w1 failed: oom");
  EXPECT_THAT(job.failure_causes(), ElementsAre(cause, "rank 0 on worker w1 failed: oom"));
  cancels = w1.channel->Of(Msg::kCancel);
  ASSERT_EQ(cancels.size(), 2u);
  EXPECT_EQ(cancels[1].cancel().attempt(), 2);
  EXPECT_FALSE(hub_->IsSettled(id)) << "rank 1 has not reported its end";
  Report(w1, id, 2, {1}, v1::RankState::KILLED);
  EXPECT_TRUE(hub_->IsSettled(id));
  EXPECT_EQ(Job(id).state(), v1::Job::FAILED);
  EXPECT_THAT(StoredStates(id),
              ElementsAre(v1::Job::PENDING, v1::Job::SCHEDULED, v1::Job::RUNNING,
                          v1::Job::RESTARTING, v1::Job::PENDING, v1::Job::SCHEDULED,
                          v1::Job::RUNNING, v1::Job::FAILED));
}

TEST_F(JobLifecycleTest, CancelSendsCancelToTheGangAndEndsCancelled) {
  Conn w1 = Connect("w1", 2);
  const std::string running = Submit(Spec(2));
  const std::string waiting = Submit(Spec(1));
  Report(w1, running, 1, {0, 1}, v1::RankState::RUNNING);
  EXPECT_EQ(Job(waiting).state(), v1::Job::PENDING);

  auto cancelled = manager_->Cancel(running, "enough");
  ASSERT_TRUE(cancelled.ok()) << cancelled.status();
  EXPECT_EQ(cancelled->state(), v1::Job::CANCELLED);
  EXPECT_EQ(cancelled->failure_reason(), "cancelled: enough");
  auto cancels = w1.channel->Of(Msg::kCancel);
  ASSERT_EQ(cancels.size(), 1u);
  EXPECT_EQ(cancels[0].cancel().job_id(), running);
  EXPECT_EQ(cancels[0].cancel().reason(), "cancelled: enough");
  EXPECT_FALSE(hub_->IsSettled(running)) << "its ranks still hold their slots";
  EXPECT_EQ(Job(waiting).state(), v1::Job::PENDING);
  Report(w1, running, 1, {0, 1}, v1::RankState::KILLED);
  EXPECT_TRUE(hub_->IsSettled(running));
  EXPECT_EQ(Job(waiting).state(), v1::Job::SCHEDULED) << "the freed slots are used";

  // A job that never ran ends at once; nothing is sent for it.
  const std::string queued = Submit(Spec(2));
  ASSERT_TRUE(manager_->Cancel(queued, "").ok());
  EXPECT_EQ(Job(queued).failure_reason(), "cancelled by user");
  EXPECT_TRUE(hub_->IsSettled(queued));
  EXPECT_EQ(w1.channel->Of(Msg::kCancel).size(), 1u);

  auto again = manager_->Cancel(running, "");
  EXPECT_EQ(again.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(again.status().message(), "job " + running + " already ended CANCELLED");
  EXPECT_EQ(manager_->Cancel("job-99", "").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(JobLifecycleTest, WorkerSilentPastTheTimeoutIsLostAndItsGangFails) {
  Conn w1 = Connect("w1", 1);
  Conn w2 = Connect("w2", 1);
  const std::string id = Submit(Spec(2));
  ASSERT_EQ(Job(id).placement().ranks(1).worker(), "w2");
  Report(w1, id, 1, {0}, v1::RankState::RUNNING);
  Report(w2, id, 1, {1}, v1::RankState::RUNNING);
  clock_.Advance(absl::Seconds(10));
  manager_->Heartbeat(w1.id, v1::Heartbeat());
  clock_.Advance(absl::Seconds(5));  // w2 silent for exactly the timeout: not yet lost
  manager_->Tick();
  EXPECT_THAT(w2.channel->closes(), IsEmpty());
  EXPECT_EQ(Job(id).state(), v1::Job::RUNNING);

  clock_.Advance(absl::Seconds(1));
  manager_->Tick();
  EXPECT_THAT(w2.channel->closes(), ElementsAre("worker lost: no heartbeat for 16s"));
  v1::Job job = Job(id);
  EXPECT_EQ(job.state(), v1::Job::FAILED);
  EXPECT_EQ(job.failure_reason(), "worker w2 lost (no heartbeat for 16s) running rank 1");
  auto cancels = w1.channel->Of(Msg::kCancel);
  ASSERT_EQ(cancels.size(), 1u);
  EXPECT_EQ(cancels[0].cancel().job_id(), id);
  auto workers = manager_->Workers();
  ASSERT_EQ(workers.size(), 1u);
  EXPECT_EQ(workers[0].name(), "w1");
}

TEST_F(JobLifecycleTest, LostWorkerRestartsTheGangOnTheWorkersLeft) {
  Conn w1 = Connect("w1", 1);
  Conn w2 = Connect("w2", 1);
  Conn w3 = Connect("w3", 1);
  const std::string id = Submit(Spec(2, 1, /*max_restarts=*/1));
  ASSERT_EQ(Job(id).placement().ranks(1).worker(), "w2");
  manager_->StreamClosed(w2.id);
  clock_.Advance(absl::Seconds(16));
  manager_->Heartbeat(w1.id, v1::Heartbeat());
  manager_->Heartbeat(w3.id, v1::Heartbeat());
  manager_->Tick();
  EXPECT_EQ(Job(id).state(), v1::Job::RESTARTING);
  // Rank 0 on w1 reports its end: after the backoff the gang starts again on w1 and w3.
  Report(w1, id, 1, {0}, v1::RankState::KILLED);
  EXPECT_EQ(Job(id).state(), v1::Job::PENDING);
  clock_.Advance(absl::Seconds(1));
  manager_->Heartbeat(w1.id, v1::Heartbeat());
  manager_->Heartbeat(w3.id, v1::Heartbeat());
  manager_->Tick();
  v1::Job job = Job(id);
  EXPECT_EQ(job.state(), v1::Job::SCHEDULED);
  EXPECT_EQ(job.attempt(), 2);
  auto on_w3 = w3.channel->Of(Msg::kAssign);
  ASSERT_EQ(on_w3.size(), 1u);
  EXPECT_EQ(Ranks(on_w3[0]), (std::vector<int>{1}));
  EXPECT_EQ(w1.channel->Of(Msg::kAssign).size(), 2u);
  std::string reason;
  for (const auto& e : Stored(id)) {
    if (e.has_job_state() && e.job_state().state() == v1::Job::RESTARTING) {
      reason = e.job_state().reason();
    }
  }
  EXPECT_EQ(reason, "worker w2 lost (disconnected for 16s) running rank 1; restart 1 of 1");
}

TEST_F(JobLifecycleTest, AWorkerThatRestartedWithoutItsRanksFailsThem) {
  Conn w1 = Connect("w1", 1);
  const std::string id = Submit(Spec(1));
  Report(w1, id, 1, {0}, v1::RankState::RUNNING);
  // The same worker on a new stream once the old one fell silent (a restarted daemon
  // behind a half-open connection), running nothing, plus an attempt nobody runs.
  clock_.Advance(absl::Seconds(7));  // three heartbeat intervals missed
  v1::RunningAttempt stray;
  stray.set_job_id("job-77");
  stray.set_attempt(3);
  Conn again = Connect("w1", 1, {stray});
  EXPECT_THAT(w1.channel->closes(),
              ElementsAre("replaced by a newer connection of the same worker (the old one fell silent)"));
  v1::Job job = Job(id);
  EXPECT_EQ(job.state(), v1::Job::FAILED);
  EXPECT_EQ(job.failure_reason(), "rank 0 on worker w1 is gone (the worker restarted)");
  auto cancels = again.channel->Of(Msg::kCancel);
  ASSERT_EQ(cancels.size(), 1u);
  EXPECT_EQ(cancels[0].cancel().job_id(), "job-77");
  EXPECT_EQ(cancels[0].cancel().reason(), "the controller does not run this attempt");
  EXPECT_TRUE(hub_->IsSettled(id));
}

v1::EventBatch Steps(const std::string& job, std::vector<std::pair<int64_t, int64_t>> seq_step) {
  v1::EventBatch batch;
  for (auto [source_seq, step] : seq_step) {
    v1::Event* e = batch.add_events();
    e->set_job_id(job);
    e->set_attempt(1);
    e->set_rank(0);
    e->set_source_seq(source_seq);
    e->mutable_step_metrics()->set_step(step);
  }
  return batch;
}

TEST_F(JobLifecycleTest, EventsAreCommittedGaplessAndAResentBatchIsDropped) {
  Conn w1 = Connect("w1", 1);
  const std::string id = Submit(Spec(1));  // PENDING (seq 1), SCHEDULED (seq 2)
  ASSERT_TRUE(manager_->IngestEvents(w1.id, Steps(id, {{1, 1}, {2, 2}, {3, 3}})).ok());
  EXPECT_EQ(Job(id).last_seq(), 5);
  // The worker did not see the ack and resends, with one new event.
  ASSERT_TRUE(manager_->IngestEvents(w1.id, Steps(id, {{1, 1}, {2, 2}, {3, 3}, {4, 4}})).ok());
  auto events = Stored(id);
  ASSERT_EQ(events.size(), 6u);
  std::vector<int64_t> steps;
  for (size_t i = 0; i < events.size(); ++i) {
    EXPECT_EQ(events[i].seq(), int64_t(i) + 1);
    if (events[i].has_step_metrics()) steps.push_back(events[i].step_metrics().step());
  }
  EXPECT_THAT(steps, ElementsAre(1, 2, 3, 4));
  EXPECT_EQ(Job(id).last_seq(), 6);
  EXPECT_EQ(Counter("trainyard_events_ingested_total"), 4);

  // A batch that cannot be committed is refused (not acknowledged) and leaves no gap.
  store_->FailNext(TestJobStore::Kind::kAppend, absl::UnavailableError("disk full"));
  absl::Status refused = manager_->IngestEvents(w1.id, Steps(id, {{5, 5}}));
  EXPECT_EQ(refused.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(refused.message(), "disk full");
  EXPECT_EQ(Stored(id).size(), 6u);
  ASSERT_TRUE(manager_->IngestEvents(w1.id, Steps(id, {{5, 5}})).ok());
  EXPECT_EQ(Stored(id).back().seq(), 7);
  EXPECT_EQ(Stored(id).back().step_metrics().step(), 5);

  absl::Status unregistered = manager_->IngestEvents(99, Steps(id, {{6, 6}}));
  EXPECT_EQ(unregistered.code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(JobLifecycleTest, AFailedJobRowCommitFailsSubmitAndLeavesNoJob) {
  Conn w1 = Connect("w1", 1);
  store_->FailNext(TestJobStore::Kind::kCreate, absl::InternalError("sqlite: disk I/O error"));
  auto job = manager_->Submit(Spec(1), "alice");
  EXPECT_EQ(job.status().code(), absl::StatusCode::kInternal);
  EXPECT_EQ(job.status().message(), "sqlite: disk I/O error");
  EXPECT_THAT(manager_->List({}, 0), IsEmpty());
  EXPECT_THAT(*db_->LoadJobs(), IsEmpty());
  EXPECT_THAT(w1.channel->Of(Msg::kAssign), IsEmpty());
  EXPECT_EQ(Counter("trainyard_jobs_submitted_total"), 0);
  // The next one is created normally.
  EXPECT_EQ(Submit(Spec(1)), "job-1");
}

TEST_F(JobLifecycleTest, AdmissionErrorsAreReturnedAndCountedAndCreateNothing) {
  Connect("w1", 2);
  auto too_big = manager_->Submit(Spec(3), "alice");
  EXPECT_EQ(too_big.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(too_big.status().message()), HasSubstr("world size"));
  v1::JobSpec unknown = Spec(1);
  unknown.mutable_model()->set_preset("huge");
  auto bad = manager_->Submit(unknown, "alice");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("model.preset"));
  EXPECT_EQ(Counter("trainyard_jobs_rejected_total"), 2);
  EXPECT_THAT(manager_->List({}, 0), IsEmpty());
  EXPECT_EQ(store_->writes(), 0);

  v1::JobSpec spec = Spec(2);
  ASSERT_TRUE(manager_->Validate(&spec).ok());
  EXPECT_EQ(spec.model().dim(), 64) << "Validate hands back the normalised spec";
  EXPECT_THAT(manager_->List({}, 0), IsEmpty());
}

// The scheduler's estimates come from the running job's reports: 100 steps, step 40
// reported at 500 ms a step, so its slot frees in 30 s. The head waiting for it gets
// that start and the slot as its reservation; a job with a 10 s time limit that fits
// the other free slot... there is none, so it waits and its start follows the head's.
TEST_F(JobLifecycleTest, APendingJobsEstimatedStartFollowsTheRunningJobsStepTime) {
  Conn w1 = Connect("w1", 2);
  v1::JobSpec long_job = Spec(1);
  long_job.mutable_training()->set_steps(100);
  const std::string running = Submit(long_job);
  Report(w1, running, 1, {0}, v1::RankState::RUNNING);
  const std::string head = Submit(Spec(2));
  EXPECT_FALSE(Job(head).has_estimated_start_time());  // no step time yet
  v1::EventBatch batch;
  batch.set_batch_id(1000);
  v1::Event* e = batch.add_events();
  e->set_job_id(running);
  e->set_attempt(1);
  e->set_rank(0);
  e->set_source_seq(1000);
  e->mutable_step_metrics()->set_step(40);
  e->mutable_step_metrics()->set_step_ms(500);
  ASSERT_TRUE(manager_->IngestEvents(w1.id, batch).ok());

  const v1::Job waiting = Job(head);
  EXPECT_EQ(waiting.pending_reason(), "needs 2 slots; 1 free: w1=1; reserved to start when " + running + " ends");
  ASSERT_TRUE(waiting.has_estimated_start_time());
  EXPECT_EQ(waiting.estimated_start_time().seconds(), absl::ToUnixSeconds(clock_.Now() + absl::Seconds(30)));
  EXPECT_EQ(std::vector<std::string>(waiting.reserved_workers().begin(), waiting.reserved_workers().end()),
            (std::vector<std::string>{"w1", "w1"}));

  // A 1-rank job with a 20 s limit ends before the reservation: it backfills now.
  v1::JobSpec quick = Spec(1);
  quick.mutable_job()->set_time_limit_s(20);
  const std::string backfilled = Submit(quick);
  EXPECT_EQ(Job(backfilled).state(), v1::Job::SCHEDULED);
  EXPECT_EQ(Job(head).state(), v1::Job::PENDING);
  // One with a 60 s limit would still hold the slot at 30 s: it waits, and is
  // estimated to start when the head... cannot know, the head has no limit.
  quick.mutable_job()->set_time_limit_s(60);
  const std::string late = Submit(quick);
  EXPECT_EQ(Job(late).state(), v1::Job::PENDING);
  EXPECT_EQ(Job(late).pending_reason(), "queued behind " + head + "; needs 1 slot; 0 free: w1=0");
  EXPECT_FALSE(Job(late).has_estimated_start_time());
}

TEST_F(JobLifecycleTest, AJobPastItsTimeLimitEndsFailedAndItsRanksAreCancelled) {
  Conn w1 = Connect("w1", 1);
  v1::JobSpec spec = Spec(1);
  spec.mutable_job()->set_time_limit_s(60);
  const std::string id = Submit(spec);
  Report(w1, id, 1, {0}, v1::RankState::RUNNING);
  for (int s : {8, 8, 8, 8, 8, 8, 8, 3}) {  // 59 s, the worker heartbeating
    clock_.Advance(absl::Seconds(s));
    manager_->Heartbeat(w1.id, v1::Heartbeat());
    manager_->Tick();
  }
  EXPECT_EQ(Job(id).state(), v1::Job::RUNNING);
  clock_.Advance(absl::Seconds(1));
  manager_->Heartbeat(w1.id, v1::Heartbeat());
  manager_->Tick();
  EXPECT_EQ(Job(id).state(), v1::Job::FAILED);
  EXPECT_EQ(Job(id).failure_reason(), "time limit of 60 s reached (job.time_limit_s)");
  auto cancels = w1.channel->Of(Msg::kCancel);
  ASSERT_EQ(cancels.size(), 1u);
  EXPECT_EQ(cancels[0].cancel().job_id(), id);
}

TEST_F(JobLifecycleTest, HigherPriorityGoesFirstThenFifoAndTheHeadHoldsTheRestBack) {
  Conn w1 = Connect("w1", 1);
  v1::JobSpec pinned = Spec(1);
  pinned.mutable_job()->set_preemptible(false);  // the order alone, no preemption
  const std::string first = Submit(pinned);
  const std::string low = Submit(Spec(1, 1, 0, /*priority=*/0));
  const std::string high = Submit(Spec(1, 1, 0, /*priority=*/5));
  EXPECT_EQ(Job(high).pending_reason(),
            "needs 1 slot; 0 free: w1=0; no start estimate until the jobs it waits for report a "
            "step time or declare job.time_limit_s");
  EXPECT_EQ(Job(low).pending_reason(), "queued behind " + high + ", whose start cannot be estimated");
  Report(w1, first, 1, {0}, v1::RankState::EXITED);
  EXPECT_EQ(Job(high).state(), v1::Job::SCHEDULED);
  EXPECT_EQ(Job(low).state(), v1::Job::PENDING);
  auto listed = manager_->List({v1::Job::PENDING}, 0);
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0].id(), low);
}

}  // namespace
}  // namespace trainyard::testing
