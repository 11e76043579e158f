// The four forgeries an independent gRPC client showed against the worker API, each
// now without effect (the transport's share, a certificate per worker, is
// tests/integration/security_test.cc's):
//   1. a fake worker reporting RUNNING / step / EXITED for a job it was never given;
//   2. a second worker reporting EXITED for a rank that runs on a real worker;
//   3. events pre-sent with source_seq 1..3000 for a rank, to take the dedup keys of
//      the real rank's later events;
//   4. a Register under a live worker's name, which used to fail its running jobs.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/server/state/manager_fixture.h"

namespace trainyard::testing {
namespace {

class ForgeryTest : public ManagerFixture {
 protected:
  v1::Event For(const std::string& job, int rank, int64_t source_seq) {
    v1::Event e;
    e.set_job_id(job);
    e.set_attempt(1);
    e.set_rank(rank);
    e.set_source_seq(source_seq);
    return e;
  }
  int StoredSteps(const std::string& id) {
    int n = 0;
    for (const auto& e : Stored(id)) n += e.has_step_metrics();
    return n;
  }
};

TEST_F(ForgeryTest, AWorkerReportingAJobItWasNeverGivenChangesNothing) {
  Conn real = Connect("w1", 1);
  const std::string id = Submit(Spec(1));  // placed on w1, the only worker
  Conn fake = Connect("fake", 1);
  ASSERT_EQ(Job(id).placement().ranks(0).worker(), "w1");
  v1::Event running = For(id, 0, 1);
  running.mutable_rank_state()->set_state(v1::RankState::RUNNING);
  v1::Event step = For(id, 0, 2);
  step.mutable_step_metrics()->set_step(20);
  v1::Event exited = For(id, 0, 3);
  exited.mutable_rank_state()->set_state(v1::RankState::EXITED);
  Send(fake, {running, step, exited});
  EXPECT_EQ(Dropped("forged"), 3);
  EXPECT_EQ(Job(id).state(), v1::Job::SCHEDULED) << "never trained, never SUCCEEDED";
  EXPECT_EQ(StoredSteps(id), 0);
}

TEST_F(ForgeryTest, ASecondWorkerCannotEndARankThatRunsElsewhere) {
  Conn real = Connect("w1", 1);
  const std::string id = Submit(Spec(1));  // placed on w1, the only worker
  Conn fake = Connect("fake", 1);
  Report(real, id, 1, {0}, v1::RankState::RUNNING);
  ASSERT_EQ(Job(id).state(), v1::Job::RUNNING);
  v1::Event exited = For(id, 0, 99);
  exited.mutable_rank_state()->set_state(v1::RankState::EXITED);
  Send(fake, {exited});
  EXPECT_EQ(Dropped("forged"), 1);
  EXPECT_EQ(Job(id).state(), v1::Job::RUNNING) << "the real rank keeps training";
}

TEST_F(ForgeryTest, PreSentSourceSeqsDoNotShadowTheRealRanksEvents) {
  Conn real = Connect("w1", 1);
  const std::string id = Submit(Spec(1));  // placed on w1, the only worker
  Conn fake = Connect("fake", 1);
  std::vector<v1::Event> squat;
  for (int64_t s = 1; s <= 3000; ++s) {
    v1::Event e = For(id, 0, s);
    e.mutable_step_metrics()->set_step(s);
    squat.push_back(std::move(e));
  }
  Send(fake, squat);
  EXPECT_EQ(Dropped("forged"), 3000);
  // The real rank's events, with the same keys, are all stored.
  std::vector<v1::Event> mine;
  for (int64_t s = 1; s <= 5; ++s) {
    v1::Event e = For(id, 0, s);
    e.mutable_step_metrics()->set_step(s);
    mine.push_back(std::move(e));
  }
  Send(real, mine);
  EXPECT_EQ(StoredSteps(id), 5);
}

TEST_F(ForgeryTest, RegisteringUnderALiveWorkersNameIsRefusedAndItsJobsRunOn) {
  Conn real = Connect("w1", 1);
  const std::string id = Submit(Spec(1));
  Report(real, id, 1, {0}, v1::RankState::RUNNING);
  v1::Register reg;
  reg.set_name("w1");
  reg.set_slots(4);
  reg.set_rendezvous_port_min(50000);
  reg.set_rendezvous_port_max(50009);  // and it runs nothing
  auto channel = std::make_shared<FakeWorkerChannel>();
  absl::Status s = manager_->RegisterWorker(999, reg, channel);
  EXPECT_EQ(s.code(), absl::StatusCode::kAlreadyExists) << s;
  EXPECT_EQ(Job(id).state(), v1::Job::RUNNING);
  EXPECT_THAT(real.channel->closes(), ::testing::IsEmpty());
  // The real worker keeps reporting on its stream.
  Report(real, id, 1, {0}, v1::RankState::EXITED);
  EXPECT_EQ(Job(id).state(), v1::Job::SUCCEEDED);
}

// Artifact uploads are fenced per attempt (worker_service's CheckUploader): the
// manager knows which worker ran each rank of the current and earlier attempts, also
// after a controller restart (rebuilt from the stored RankState events).
TEST_F(ForgeryTest, EachAttemptsPlacementIsKnownAlsoAfterARestart) {
  Conn w1 = Connect("w1", 1);
  v1::JobSpec spec = Spec(1, 1, /*max_restarts=*/1);
  spec.mutable_restart()->set_backoff_s(0);
  const std::string id = Submit(spec);
  Conn w2 = Connect("w2", 1);
  ASSERT_EQ(Job(id).placement().ranks(0).worker(), "w1");
  Report(w1, id, 1, {0}, v1::RankState::RUNNING);
  Report(w1, id, 1, {0}, v1::RankState::FAILED, "exit code 1");
  manager_->Tick();
  ASSERT_EQ(Job(id).attempt(), 2);
  const std::string second = Job(id).placement().ranks(0).worker();
  Report(second == "w1" ? w1 : w2, id, 2, {0}, v1::RankState::RUNNING);
  using Workers = std::vector<std::string>;
  EXPECT_EQ(manager_->AttemptWorkers(id, 1), Workers{"w1"});
  EXPECT_EQ(manager_->AttemptWorkers(id, 2), Workers{second});
  EXPECT_EQ(manager_->AttemptWorkers(id, 3), std::nullopt) << "never started";
  EXPECT_EQ(manager_->AttemptWorkers(id, 0), std::nullopt);
  EXPECT_EQ(manager_->AttemptWorkers("job-404", 1), std::nullopt);
  Restart();
  EXPECT_EQ(manager_->AttemptWorkers(id, 1), Workers{"w1"});
  EXPECT_EQ(manager_->AttemptWorkers(id, 2), Workers{second});
}

}  // namespace
}  // namespace trainyard::testing
