// Unreachable is not lost (JobManager with the fake clock, fake worker channels and a
// real SqliteJobStore): a worker silent past the heartbeat timeout (15 s here) keeps its
// attempts for the reconnect window (25 s here); back in time, on its open stream or by
// registering again with its ranks alive, the attempt is re-adopted (no restart, its
// buffered events in order); past the window it is lost and the attempt restarts as
// before; a worker back after the controller moved on is told to stop; a rank elsewhere
// reporting the gang broken ends the wait at once.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/proto_time.h"
#include "tests/server/state/manager_fixture.h"

namespace trainyard::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using Msg = v1::ControllerMessage;

class ReconnectTest : public ManagerFixture {
 protected:
  ReconnectTest() {
    reconnect_window_ = absl::Seconds(25);
    manager_ = NewManager();
  }

  v1::Event Step(const std::string& job, int attempt, int rank, int64_t step) {
    v1::Event e;
    e.set_job_id(job);
    e.set_attempt(attempt);
    e.set_rank(rank);
    e.set_source_seq(++source_seq_[{job, attempt, rank}]);
    e.mutable_step_metrics()->set_step(step);
    e.mutable_step_metrics()->set_loss(10.0 - static_cast<double>(step) / 8);
    return e;
  }
  // The controller's log lines in the job's stream.
  std::vector<std::string> ControllerLogs(const std::string& id) {
    std::vector<std::string> out;
    for (const auto& e : Stored(id)) {
      if (e.rank() == -1 && e.has_log()) out.push_back(e.log().message());
    }
    return out;
  }
  // The steps of rank `rank`'s StepMetrics in the job's stream, in seq order.
  std::vector<int64_t> StoredSteps(const std::string& id, int rank) {
    std::vector<int64_t> out;
    for (const auto& e : Stored(id)) {
      if (e.rank() == rank && e.has_step_metrics()) out.push_back(e.step_metrics().step());
    }
    return out;
  }
  // The seqs of the job's stream, which must run 1, 2, 3, ... without a gap.
  void ExpectGapless(const std::string& id) {
    int64_t want = 1;
    for (const auto& e : Stored(id)) EXPECT_EQ(e.seq(), want++);
  }
  std::optional<v1::WorkerInfo> Worker(const std::string& name) {
    for (auto& w : manager_->Workers()) {
      if (w.name() == name) return w;
    }
    return std::nullopt;
  }
  static v1::RunningAttempt Running(const std::string& job, int attempt, const std::vector<int>& ranks) {
    v1::RunningAttempt ra;
    ra.set_job_id(job);
    ra.set_attempt(attempt);
    for (int r : ranks) ra.add_ranks(r);
    return ra;
  }
};

TEST_F(ReconnectTest, AWorkerBackOnItsOpenStreamInsideTheWindowKeepsTheAttempt) {
  Conn w1 = Connect("w1", 2);
  v1::JobSpec spec = Spec(1, 1, /*max_restarts=*/3);
  spec.mutable_restart()->set_backoff_s(0);
  const std::string id = Submit(spec);
  ASSERT_EQ(Job(id).placement().ranks(0).worker(), "w1");
  Report(w1, id, 1, {0}, v1::RankState::RUNNING);
  Send(w1, {Step(id, 1, 0, 1), Step(id, 1, 0, 2)});
  ASSERT_EQ(Job(id).state(), v1::Job::RUNNING);
  const absl::Time last_heard = clock_.Now();

  // 16 s silent: past the 15 s timeout, unreachable, not lost.
  Pass(absl::Seconds(16), {});
  v1::Job job = Job(id);
  EXPECT_EQ(job.state(), v1::Job::RUNNING);
  EXPECT_EQ(job.attempt(), 1);
  EXPECT_THAT(w1.channel->Of(Msg::kCancel), IsEmpty());
  EXPECT_THAT(w1.channel->closes(), IsEmpty()) << "the stream stays open for the worker to resume on";
  const std::string since = absl::FormatTime("%H:%M:%SZ", last_heard + absl::Seconds(15), absl::UTCTimeZone());
  const std::string until = absl::FormatTime("%H:%M:%SZ", last_heard + absl::Seconds(40), absl::UTCTimeZone());
  EXPECT_EQ(job.unreachable_reason(), "waiting up to 25s (until " + until + ") for worker w1 to reconnect (unreachable since " +
                                          since + ", no heartbeat for 16s)");
  std::optional<v1::WorkerInfo> info = Worker("w1");
  ASSERT_TRUE(info.has_value());
  EXPECT_TRUE(info->unreachable());
  EXPECT_EQ(FromProtoTime(info->unreachable_since()), last_heard + absl::Seconds(15));
  EXPECT_EQ(FromProtoTime(info->reconnect_deadline()), last_heard + absl::Seconds(40));
  EXPECT_THAT(ControllerLogs(id), ElementsAre("worker w1 unreachable (no heartbeat for 16s) running rank 0; attempt 1 "
                                              "keeps running, waiting up to 25s (until " +
                                              until + ") for it to reconnect"));
  // Its free slot takes no new rank while it is unreachable.
  const std::string other = Submit(Spec(1));
  EXPECT_EQ(Job(other).state(), v1::Job::PENDING);

  // 39 s silent (the window's last second), then its buffered steps and a heartbeat
  // arrive on the same stream.
  Pass(absl::Seconds(23), {});
  ASSERT_EQ(Job(id).state(), v1::Job::RUNNING);
  Send(w1, {Step(id, 1, 0, 3), Step(id, 1, 0, 4), Step(id, 1, 0, 5)});
  Pass(absl::Seconds(1), {w1});

  job = Job(id);
  EXPECT_EQ(job.state(), v1::Job::RUNNING);
  EXPECT_EQ(job.attempt(), 1);
  EXPECT_EQ(job.unreachable_reason(), "");
  EXPECT_THAT(job.failure_causes(), IsEmpty());
  EXPECT_THAT(w1.channel->Of(Msg::kCancel), IsEmpty());
  EXPECT_FALSE(Worker("w1")->unreachable());
  EXPECT_EQ(ControllerLogs(id).back(), "worker w1 reconnected after 39.0s; attempt 1 re-adopted");
  EXPECT_THAT(StoredSteps(id, 0), ElementsAre(1, 2, 3, 4, 5));
  // The slot is usable again: the other job is placed on w1.
  EXPECT_EQ(Job(other).state(), v1::Job::SCHEDULED);
  EXPECT_EQ(Job(other).placement().ranks(0).worker(), "w1");

  Report(w1, id, 1, {0}, v1::RankState::EXITED);
  EXPECT_EQ(Job(id).state(), v1::Job::SUCCEEDED);
  EXPECT_EQ(Job(id).attempt(), 1);
  EXPECT_THAT(StoredStates(id), ElementsAre(v1::Job::PENDING, v1::Job::SCHEDULED, v1::Job::RUNNING,
                                            v1::Job::SUCCEEDED));
  ExpectGapless(id);
}

TEST_F(ReconnectTest, AWorkerThatRegistersAgainWithItsRanksAliveKeepsTheAttempt) {
  Conn w1 = Connect("w1", 1);
  const std::string id = Submit(Spec(1, 1, /*max_restarts=*/3));
  Report(w1, id, 1, {0}, v1::RankState::RUNNING);
  Send(w1, {Step(id, 1, 0, 1)});
  // The link is cut: the stream ends on the controller's side too.
  manager_->StreamClosed(w1.id);
  Pass(absl::Seconds(16), {});
  Pass(absl::Seconds(4), {});
  ASSERT_EQ(Job(id).state(), v1::Job::RUNNING);
  EXPECT_THAT(Job(id).unreachable_reason(), HasSubstr("for worker w1 to reconnect"));

  // gRPC reconnects: a new stream, Register naming the attempt it still runs, then the
  // unacknowledged batch again (dropped as a resend) and the steps made meanwhile.
  Conn again = Connect("w1", 1, {Running(id, 1, {0})});
  v1::Event resent = Step(id, 1, 0, 1);
  resent.set_source_seq(resent.source_seq() - 1);  // the same event, sent twice
  Send(again, {resent, Step(id, 1, 0, 2), Step(id, 1, 0, 3)});
  Pass(absl::Seconds(1), {again});

  EXPECT_THAT(again.channel->Of(Msg::kCancel), IsEmpty());
  EXPECT_EQ(Job(id).state(), v1::Job::RUNNING);
  EXPECT_EQ(Job(id).attempt(), 1);
  EXPECT_EQ(Job(id).unreachable_reason(), "");
  EXPECT_EQ(ControllerLogs(id).back(), "worker w1 reconnected after 20.0s (registered again); attempt 1 re-adopted");
  EXPECT_THAT(StoredSteps(id, 0), ElementsAre(1, 2, 3));
  Report(again, id, 1, {0}, v1::RankState::EXITED);
  EXPECT_EQ(Job(id).state(), v1::Job::SUCCEEDED);
  EXPECT_THAT(Job(id).failure_causes(), IsEmpty());
  ExpectGapless(id);
}

TEST_F(ReconnectTest, PastTheWindowTheWorkerIsLostAndTheAttemptRestartsThenTheLateWorkerIsToldToStop) {
  Conn w1 = Connect("w1", 1);
  v1::JobSpec spec = Spec(1, 1, /*max_restarts=*/3);
  spec.mutable_restart()->set_backoff_s(0);
  const std::string id = Submit(spec);
  ASSERT_EQ(Job(id).placement().ranks(0).worker(), "w1");
  Conn w2 = Connect("w2", 1);
  Report(w1, id, 1, {0}, v1::RankState::RUNNING);
  Pass(absl::Seconds(16), {w2});
  Pass(absl::Seconds(24), {w2});  // 40 s silent: timeout + window, still waited for
  ASSERT_EQ(Job(id).attempt(), 1);
  Pass(absl::Seconds(1), {w2});

  const v1::Job job = Job(id);
  EXPECT_EQ(job.attempt(), 2);
  EXPECT_EQ(job.state(), v1::Job::SCHEDULED);
  EXPECT_EQ(job.placement().ranks(0).worker(), "w2");
  EXPECT_THAT(job.failure_causes(),
              ElementsAre("worker w1 lost (no heartbeat for 41s, not back within the 25s reconnect window) running "
                          "rank 0"));
  EXPECT_FALSE(Worker("w1").has_value());
  EXPECT_THAT(w1.channel->closes(), ElementsAre(HasSubstr("worker lost: no heartbeat for 41s")));

  // w1 comes back still running attempt 1: the controller runs attempt 2 elsewhere.
  Conn late = Connect("w1", 1, {Running(id, 1, {0})});
  auto cancels = late.channel->Of(Msg::kCancel);
  ASSERT_EQ(cancels.size(), 1u);
  EXPECT_EQ(cancels[0].cancel().job_id(), id);
  EXPECT_EQ(cancels[0].cancel().attempt(), 1);
  Pass(absl::Seconds(1), {late, w2});
  for (const auto& line : ControllerLogs(id)) EXPECT_THAT(line, ::testing::Not(HasSubstr("re-adopted")));
  EXPECT_EQ(Job(id).attempt(), 2);
}

TEST_F(ReconnectTest, AJobCancelledWhileItsWorkerIsUnreachableEndsAtOnceAndTheReturningWorkerStopsIt) {
  Conn w1 = Connect("w1", 1);
  const std::string id = Submit(Spec(1));
  Report(w1, id, 1, {0}, v1::RankState::RUNNING);
  Pass(absl::Seconds(16), {});
  ASSERT_TRUE(manager_->Cancel(id, "not needed").ok());
  Pass(absl::Seconds(1), {});
  EXPECT_EQ(Job(id).state(), v1::Job::CANCELLED);
  EXPECT_EQ(Job(id).unreachable_reason(), "");
  // The Cancel waits on w1's open stream; the job no longer counts its rank, but the
  // rank may still run on w1 and keeps its slot until w1 reports it gone.
  auto cancels = w1.channel->Of(Msg::kCancel);
  ASSERT_EQ(cancels.size(), 1u);
  EXPECT_EQ(cancels[0].cancel().attempt(), 1);
  const size_t stored = Stored(id).size();
  // Back on the same stream: nothing is re-adopted, nothing follows the terminal state.
  Pass(absl::Seconds(1), {w1});
  EXPECT_EQ(Stored(id).size(), stored);
  EXPECT_EQ(Stored(id).back().job_state().state(), v1::Job::CANCELLED);
  EXPECT_EQ(Worker("w1")->free_slots(), 0);
  Report(w1, id, 1, {0}, v1::RankState::KILLED);
  EXPECT_EQ(Worker("w1")->free_slots(), 1);
  EXPECT_EQ(Stored(id).size(), stored) << "dropped: the job's stream is closed";
}

// A two-worker gang, one worker unreachable: back in time, the gang goes on; but a rank
// on the reachable worker reporting the gang broken (its collective timed out) fails the
// attempt at once, blamed on the unreachable worker, and the restart does not wait for
// that worker's window.
TEST_F(ReconnectTest, AGangWithOneUnreachableWorkerWaitsUnlessItsOtherRanksReportItBroken) {
  Conn w1 = Connect("w1", 1);
  Conn w2 = Connect("w2", 1);
  v1::JobSpec spec = Spec(2, 1, /*max_restarts=*/3);
  spec.mutable_restart()->set_backoff_s(0);
  const std::string id = Submit(spec);
  ASSERT_EQ(Job(id).placement().ranks(0).worker(), "w1");
  ASSERT_EQ(Job(id).placement().ranks(1).worker(), "w2");
  Conn w3 = Connect("w3", 1);
  Report(w1, id, 1, {0}, v1::RankState::RUNNING);
  Report(w2, id, 1, {1}, v1::RankState::RUNNING);

  // w2 away 20 s and back: one attempt.
  Pass(absl::Seconds(16), {w1, w3});
  EXPECT_THAT(Job(id).unreachable_reason(), HasSubstr("for worker w2 to reconnect"));
  Pass(absl::Seconds(4), {w1, w2, w3});
  EXPECT_EQ(Job(id).attempt(), 1);
  EXPECT_EQ(ControllerLogs(id).back(), "worker w2 reconnected after 20.0s; attempt 1 re-adopted");

  // w2 away again; this time rank 0's collective gives up on rank 1.
  Pass(absl::Seconds(16), {w1, w3});
  ASSERT_EQ(Job(id).attempt(), 1);
  Report(w1, id, 1, {0}, v1::RankState::FAILED, "exit code 1: collective timeout waiting for rank 1");
  Pass(absl::Seconds(1), {w1, w3});  // 17 s into w2's silence, far inside its window
  const v1::Job job = Job(id);
  EXPECT_EQ(job.attempt(), 2);
  EXPECT_EQ(job.state(), v1::Job::SCHEDULED);
  EXPECT_EQ(job.placement().ranks(0).worker(), "w1");
  EXPECT_EQ(job.placement().ranks(1).worker(), "w3");
  // Blamed on the unreachable worker, not on w1 whose rank saw the gang break.
  EXPECT_THAT(job.failure_causes(),
              ElementsAre("rank 0 on worker w1 failed (worker w2 of the attempt unreachable: no heartbeat for 16s): "
                          "exit code 1: collective timeout waiting for rank 1"));
  auto cancels = w2.channel->Of(Msg::kCancel);
  ASSERT_EQ(cancels.size(), 1u) << "queued on w2's open stream";
  EXPECT_EQ(cancels[0].cancel().attempt(), 1);
  // w2 re-registers still running attempt 1: told to stop it.
  Conn back = Connect("w2", 1, {Running(id, 1, {1})});
  cancels = back.channel->Of(Msg::kCancel);
  ASSERT_EQ(cancels.size(), 1u);
  EXPECT_EQ(cancels[0].cancel().attempt(), 1);
  EXPECT_EQ(Job(id).attempt(), 2);
}

// A controller restart while a worker is partitioned: recovery expects the placement's
// workers back; one that is not back within the heartbeat timeout is unreachable, and
// its registration with the live ranks inside the window re-adopts the attempt.
TEST_F(ReconnectTest, AfterAControllerRestartAPartitionedWorkerIsReAdoptedInsideTheWindow) {
  Conn w1 = Connect("w1", 1);
  const std::string id = Submit(Spec(1, 1, /*max_restarts=*/3));
  Report(w1, id, 1, {0}, v1::RankState::RUNNING);
  Send(w1, {Step(id, 1, 0, 1)});
  Restart();
  Pass(absl::Seconds(16), {});
  ASSERT_EQ(Job(id).state(), v1::Job::RUNNING);
  EXPECT_THAT(Job(id).unreachable_reason(), HasSubstr("for worker w1 to reconnect"));
  Pass(absl::Seconds(14), {});  // 30 s after the restart
  Conn back = Connect("w1", 1, {Running(id, 1, {0})});
  Send(back, {Step(id, 1, 0, 2)});
  Pass(absl::Seconds(1), {back});
  EXPECT_THAT(back.channel->Of(Msg::kCancel), IsEmpty());
  EXPECT_EQ(Job(id).attempt(), 1);
  EXPECT_EQ(Job(id).state(), v1::Job::RUNNING);
  EXPECT_EQ(ControllerLogs(id).back(), "worker w1 reconnected after 30.0s (registered again); attempt 1 re-adopted");
  EXPECT_THAT(StoredSteps(id, 0), ElementsAre(1, 2));
  ExpectGapless(id);
}

TEST(UnreachableWorkerRegistryTest, AnUnreachableWorkerTakesNoNewRanksUntilHeardFromAgain) {
  FakeClock clock;
  WorkerRegistry registry{&clock, absl::Seconds(2), absl::Seconds(15), absl::Seconds(25)};
  Effects fx;
  v1::Register reg;
  reg.set_name("w1");
  reg.set_slots(2);
  reg.set_rendezvous_port_min(40000);
  reg.set_rendezvous_port_max(40009);
  ASSERT_TRUE(registry.Register(1, reg, std::make_shared<FakeWorkerChannel>(), &fx).ok());
  clock.Advance(absl::Seconds(16));
  WorkerChanges changes = registry.Tick(&fx);
  ASSERT_EQ(changes.unreachable.size(), 1u);
  EXPECT_THAT(registry.ConnectedFree(), IsEmpty());
  EXPECT_EQ(registry.ConnectedSlots(), 2) << "admission still counts a worker expected back";
  EXPECT_TRUE(registry.Unreachable("w1").has_value());
  clock.Advance(absl::Seconds(2));
  EXPECT_TRUE(registry.Touch(1));
  changes = registry.Tick(&fx);
  ASSERT_EQ(changes.reconnected.size(), 1u);
  EXPECT_EQ(changes.reconnected[0].name, "w1");
  EXPECT_EQ(changes.reconnected[0].silent, absl::Seconds(18));
  EXPECT_FALSE(changes.reconnected[0].registered);
  EXPECT_FALSE(registry.Unreachable("w1").has_value());
  ASSERT_EQ(registry.ConnectedFree().size(), 1u);
  EXPECT_THAT(registry.Tick(&fx).reconnected, IsEmpty()) << "reported once";
}

}  // namespace
}  // namespace trainyard::testing
