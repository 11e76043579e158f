// Slots come back when the worker says its ranks are gone (JobManager with the fake
// clock, fake worker channels and a real SqliteJobStore): a worker lost past the
// reconnect window that comes back still running its old attempt, or an unreachable
// worker whose attempt was given up, takes no new ranks on the slots its old ranks hold
// until it reports them ended; and a worker that refuses an Assign for want of slots
// costs the job no restart and no blame, and takes no ranks until it reports its free
// slots again.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/events/rank_exit.h"
#include "tests/server/state/manager_fixture.h"

namespace trainyard::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using Msg = v1::ControllerMessage;

class ReturningWorkerTest : public ManagerFixture {
 protected:
  ReturningWorkerTest() {
    reconnect_window_ = absl::Seconds(25);
    manager_ = NewManager();
  }

  static v1::RunningAttempt Running(const std::string& job, int attempt, const std::vector<int>& ranks) {
    v1::RunningAttempt ra;
    ra.set_job_id(job);
    ra.set_attempt(attempt);
    for (int r : ranks) ra.add_ranks(r);
    return ra;
  }
  static v1::JobSpec NoBackoff(int dp, int max_restarts) {
    v1::JobSpec spec = Spec(dp, 1, max_restarts);
    spec.mutable_restart()->set_backoff_s(0);
    return spec;
  }
  int FreeSlots(const std::string& name) {
    for (const auto& w : manager_->Workers()) {
      if (w.name() == name) return w.free_slots();
    }
    return -1;
  }
  // The worker's refusal of `ranks` of the attempt, as RankSupervisor reports it.
  void Refuse(const Conn& c, const std::string& job, int attempt, const std::vector<int>& ranks, int free, int slots) {
    v1::EventBatch batch = RankStates(c, job, attempt, ranks, v1::RankState::FAILED,
                                      "assign needs " + std::to_string(ranks.size()) + " slots but worker " + c.name +
                                          " has " + std::to_string(free) + " free of " + std::to_string(slots));
    for (auto& e : *batch.mutable_events()) e.mutable_rank_state()->set_exit_code(kRankExitRefused);
    ASSERT_TRUE(manager_->IngestEvents(c.id, batch).ok());
  }
  void HeartbeatWithFree(const Conn& c, int free) {
    v1::Heartbeat hb;
    hb.set_free_slots(free);
    manager_->Heartbeat(c.id, hb);
  }
};

// The sequence: w1 (2 slots) runs a dp=2 job; it is stopped past the reconnect
// window, lost, and the attempt fails (restart 1 of 1). Continued, it registers still
// running the old ranks; the controller cancels them and must not place the restart
// (or the job waiting behind it) there until they are reported gone.
TEST_F(ReturningWorkerTest, AWorkerBackPastTheWindowTakesNewRanksOnlyOnceItsOldOnesAreGone) {
  Conn w1 = Connect("w1", 2);
  const std::string a = Submit(NoBackoff(2, /*max_restarts=*/1));
  ASSERT_EQ(Job(a).state(), v1::Job::SCHEDULED);
  Report(w1, a, 1, {0, 1}, v1::RankState::RUNNING);
  const std::string b = Submit(NoBackoff(2, /*max_restarts=*/0));
  ASSERT_EQ(Job(b).state(), v1::Job::PENDING);

  Pass(absl::Seconds(16), {});
  Pass(absl::Seconds(24), {});
  Pass(absl::Seconds(1), {});  // 41 s: past the 15 s timeout and the 25 s window
  ASSERT_EQ(Job(a).state(), v1::Job::PENDING);
  ASSERT_EQ(Job(a).failure_causes_size(), 1);

  Conn back = Connect("w1", 2, {Running(a, 1, {0, 1})});
  auto cancels = back.channel->Of(Msg::kCancel);
  ASSERT_EQ(cancels.size(), 1u);
  EXPECT_EQ(cancels[0].cancel().attempt(), 1);
  EXPECT_THAT(back.channel->Of(Msg::kAssign), IsEmpty()) << "placed on slots its old ranks still hold";
  EXPECT_EQ(FreeSlots("w1"), 0);
  Pass(absl::Seconds(1), {back});
  EXPECT_THAT(back.channel->Of(Msg::kAssign), IsEmpty());
  EXPECT_EQ(Job(a).state(), v1::Job::PENDING);

  // One old rank gone: one slot back, not enough for either gang.
  Report(back, a, 1, {0}, v1::RankState::KILLED);
  EXPECT_EQ(FreeSlots("w1"), 1);
  EXPECT_THAT(back.channel->Of(Msg::kAssign), IsEmpty());
  Report(back, a, 1, {1}, v1::RankState::KILLED);
  auto assigns = back.channel->Of(Msg::kAssign);
  ASSERT_EQ(assigns.size(), 1u);
  EXPECT_EQ(assigns[0].assign().job_id(), a);
  EXPECT_EQ(assigns[0].assign().attempt(), 2);
  EXPECT_EQ(Job(a).failure_causes_size(), 1) << "the loss only";
  EXPECT_THAT(LastReason(a, v1::Job::SCHEDULED), Not(HasSubstr("avoiding")));

  Report(back, a, 2, {0, 1}, v1::RankState::RUNNING);
  Report(back, a, 2, {0, 1}, v1::RankState::EXITED);
  EXPECT_EQ(Job(a).state(), v1::Job::SUCCEEDED);
  EXPECT_EQ(Job(b).state(), v1::Job::SCHEDULED);
  EXPECT_EQ(Job(b).attempt(), 1);
  EXPECT_THAT(Job(b).failure_causes(), IsEmpty());
}

// An attempt given up while one of its workers is unreachable (a rank elsewhere reported
// the gang broken) counts that worker's rank as ended at once, but the worker keeps the
// slot busy for it: back on its open stream, it gets no new rank until the old one ends.
TEST_F(ReturningWorkerTest, AnAttemptGivenUpWhileItsWorkerIsUnreachableKeepsThatSlotBusyUntilTheRankEnds) {
  Conn w1 = Connect("w1", 1);
  Conn w2 = Connect("w2", 1);
  const std::string id = Submit(NoBackoff(2, /*max_restarts=*/3));
  ASSERT_EQ(Job(id).placement().ranks(1).worker(), "w2");
  Report(w1, id, 1, {0}, v1::RankState::RUNNING);
  Report(w2, id, 1, {1}, v1::RankState::RUNNING);
  Pass(absl::Seconds(16), {w1});
  Report(w1, id, 1, {0}, v1::RankState::FAILED, "exit code 1: collective timeout waiting for rank 1");
  Pass(absl::Seconds(1), {w1});
  ASSERT_EQ(Job(id).state(), v1::Job::PENDING) << "w2 is unreachable: no slots for dp=2";
  EXPECT_EQ(FreeSlots("w2"), 0) << "its rank of the given-up attempt may still run";

  Pass(absl::Seconds(1), {w1, w2});  // back on its open stream
  EXPECT_THAT(w2.channel->Of(Msg::kAssign), ElementsAre(::testing::_)) << "only attempt 1's Assign";
  EXPECT_EQ(Job(id).state(), v1::Job::PENDING);
  Report(w2, id, 1, {1}, v1::RankState::KILLED);
  EXPECT_EQ(Job(id).state(), v1::Job::SCHEDULED);
  EXPECT_EQ(Job(id).attempt(), 2);
  EXPECT_EQ(w2.channel->Of(Msg::kAssign).size(), 2u);
}

// The same for a job cancelled meanwhile: its stream is closed when the worker reports
// the rank (the event is dropped), and the slot still comes back.
TEST_F(ReturningWorkerTest, ARankOfACancelledJobFreesItsSlotWhenReportedAfterTheJobEnded) {
  Conn w1 = Connect("w1", 1);
  const std::string id = Submit(Spec(1));
  Report(w1, id, 1, {0}, v1::RankState::RUNNING);
  Pass(absl::Seconds(16), {});
  ASSERT_TRUE(manager_->Cancel(id, "not needed").ok());
  Pass(absl::Seconds(1), {});
  ASSERT_EQ(Job(id).state(), v1::Job::CANCELLED);
  const std::string next = Submit(Spec(1));
  Pass(absl::Seconds(1), {w1});
  EXPECT_EQ(Job(next).state(), v1::Job::PENDING);
  EXPECT_EQ(FreeSlots("w1"), 0);
  Report(w1, id, 1, {0}, v1::RankState::KILLED);
  EXPECT_EQ(Dropped("job_ended"), 1);
  EXPECT_EQ(Job(next).state(), v1::Job::SCHEDULED);
}

// A worker that registers again without the stray ranks (it restarted, they died with
// it) gets its slots back at once.
TEST_F(ReturningWorkerTest, ARegistrationWithoutTheStrayRanksFreesTheirSlots) {
  Conn w1 = Connect("w1", 2);
  const std::string a = Submit(NoBackoff(2, /*max_restarts=*/1));
  Report(w1, a, 1, {0, 1}, v1::RankState::RUNNING);
  Pass(absl::Seconds(41), {});
  Conn back = Connect("w1", 2, {Running(a, 1, {0, 1})});
  ASSERT_EQ(FreeSlots("w1"), 0);
  Pass(absl::Seconds(7), {});  // that stream falls silent, then a new process registers
  Conn restarted = Connect("w1", 2);
  EXPECT_THAT(back.channel->closes(), ElementsAre(HasSubstr("replaced by a newer connection")));
  EXPECT_EQ(Job(a).attempt(), 2);
  EXPECT_EQ(restarted.channel->Of(Msg::kAssign).size(), 1u);
}

// A refusal is the controller's count being wrong: no restart used (max_restarts=0, yet
// the job is placed again, twice), no worker blamed (no "avoiding w1"), and the worker
// takes no new ranks until a heartbeat reports the free slots the controller counts.
TEST_F(ReturningWorkerTest, ARefusedAssignmentUsesNoRestartBlamesNoWorkerAndWaitsForTheWorkersCount) {
  Conn w1 = Connect("w1", 2);
  const std::string id = Submit(NoBackoff(2, /*max_restarts=*/0));
  ASSERT_EQ(Job(id).state(), v1::Job::SCHEDULED);
  for (int attempt = 1; attempt <= 2; ++attempt) {
    Refuse(w1, id, attempt, {0, 1}, /*free=*/0, /*slots=*/2);
    const v1::Job job = Job(id);
    EXPECT_EQ(job.state(), v1::Job::PENDING) << "attempt " << attempt;
    EXPECT_THAT(job.failure_causes(), IsEmpty());
    EXPECT_EQ(LastReason(id, v1::Job::RESTARTING),
              RefusalReason("w1", 0, attempt, "assign needs 2 slots but worker w1 has 0 free of 2"));
    // Still short of slots by its own count: stays out.
    HeartbeatWithFree(w1, 1);
    Pass(absl::Seconds(1), {});
    EXPECT_EQ(Job(id).state(), v1::Job::PENDING);
    // Agrees with the controller: back in.
    HeartbeatWithFree(w1, 2);
    Pass(absl::Seconds(1), {});
    ASSERT_EQ(Job(id).state(), v1::Job::SCHEDULED) << "attempt " << attempt + 1;
    EXPECT_THAT(LastReason(id, v1::Job::SCHEDULED), Not(HasSubstr("avoiding")));
    EXPECT_THAT(LastReason(id, v1::Job::SCHEDULED), Not(HasSubstr("failed there")));
  }
  EXPECT_EQ(Job(id).attempt(), 3);
  Report(w1, id, 3, {0, 1}, v1::RankState::RUNNING);
  Report(w1, id, 3, {0, 1}, v1::RankState::EXITED);
  EXPECT_EQ(Job(id).state(), v1::Job::SUCCEEDED);
}

// After a controller restart the refused attempts still used no restart (recovery reads
// them from the stream): a real failure of the next attempt restarts (1 of 1).
TEST_F(ReturningWorkerTest, RefusalsStillUseNoRestartAfterAControllerRestart) {
  Conn w1 = Connect("w1", 1);
  const std::string id = Submit(NoBackoff(1, /*max_restarts=*/1));
  Refuse(w1, id, 1, {0}, 0, 1);
  HeartbeatWithFree(w1, 1);
  Pass(absl::Seconds(1), {});
  ASSERT_EQ(Job(id).attempt(), 2);
  Restart();
  Conn again = Connect("w1", 1, {Running(id, 2, {0})});
  Report(again, id, 2, {0}, v1::RankState::FAILED, "exit code 1: boom");
  EXPECT_EQ(Job(id).state(), v1::Job::SCHEDULED) << LastReason(id, v1::Job::FAILED);
  EXPECT_EQ(Job(id).attempt(), 3);
  EXPECT_THAT(LastReason(id, v1::Job::RESTARTING), HasSubstr("boom; restart 1 of 1"));
}

}  // namespace
}  // namespace trainyard::testing
