// Ordering and durability of JobManager's writes: no store write runs under the state
// lock (readers return while a write is held inside the store, and see only committed
// state), Submit returns only after its row is committed, and a worker hears of a
// placement or a cancel only after the state naming it was committed.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <thread>

#include "absl/synchronization/notification.h"
#include "tests/server/state/manager_fixture.h"

namespace trainyard::testing {
namespace {

using ::testing::IsEmpty;

class CommitOrderTest : public ManagerFixture {
 protected:
  // Runs every reader (and the in-memory-only worker calls) on another thread while a
  // write is held inside the store; true when they all returned. The bound only turns
  // a deadlock into a failure instead of a hang; it measures nothing.
  bool ReadersReturn(const std::string& id, int64_t conn, v1::Job* seen,
                     std::vector<v1::Job>* listed) {
    absl::Notification done;
    std::thread reader([&] {
      auto job = manager_->Get(id);
      if (job.ok()) *seen = *job;
      *listed = manager_->List({}, 0);
      manager_->Workers();
      manager_->Heartbeat(conn, v1::Heartbeat());
      done.Notify();
    });
    const bool returned = done.WaitForNotificationWithTimeout(absl::Minutes(1));
    held_->release.Notify();  // let the writer finish either way
    reader.join();
    return returned;
  }

  std::shared_ptr<TestJobStore::Gate> held_;
};

TEST_F(CommitOrderTest, ReadersDoNotWaitForACancelsWriteAndSeeCommittedState) {
  Conn w1 = Connect("w1", 1);
  const std::string id = Submit(Spec(1));
  Report(w1, id, 1, {0}, v1::RankState::RUNNING);
  ASSERT_EQ(Job(id).state(), v1::Job::RUNNING);

  held_ = store_->HoldNextWrite();
  absl::StatusOr<v1::Job> cancelled;
  std::thread writer([&] { cancelled = manager_->Cancel(id, "stop"); });
  held_->entered.WaitForNotification();  // the CANCELLED row is being written
  v1::Job seen;
  std::vector<v1::Job> listed;
  const bool returned = ReadersReturn(id, w1.id, &seen, &listed);
  writer.join();
  EXPECT_TRUE(returned) << "a reader waited for a store write: it ran under the state lock";
  EXPECT_EQ(seen.state(), v1::Job::RUNNING) << "readers see committed state only";
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0].state(), v1::Job::RUNNING);
  ASSERT_TRUE(cancelled.ok()) << cancelled.status();
  EXPECT_EQ(cancelled->state(), v1::Job::CANCELLED);
  EXPECT_EQ(Job(id).state(), v1::Job::CANCELLED);
}

TEST_F(CommitOrderTest, ReadersDoNotWaitForAWorkerBatchCommit) {
  Conn w1 = Connect("w1", 1);
  const std::string id = Submit(Spec(1));
  const int64_t before = Job(id).last_seq();
  held_ = store_->HoldNextWrite();
  absl::Status ingested;
  std::thread writer([&] {
    ingested = manager_->IngestEvents(w1.id, RankStates(w1, id, 1, {0}, v1::RankState::RUNNING));
  });
  held_->entered.WaitForNotification();
  v1::Job seen;
  std::vector<v1::Job> listed;
  const bool returned = ReadersReturn(id, w1.id, &seen, &listed);
  writer.join();
  EXPECT_TRUE(returned) << "a reader waited for the batch's commit";
  EXPECT_EQ(seen.last_seq(), before) << "the batch was not committed yet";
  EXPECT_TRUE(ingested.ok()) << ingested;
  EXPECT_EQ(Job(id).state(), v1::Job::RUNNING);
  EXPECT_EQ(Job(id).last_seq(), before + 2);  // the rank's RUNNING, then the job's
}

TEST_F(CommitOrderTest, SubmitReturnsAfterItsRowIsCommittedAndReadersNeverWait) {
  Conn w1 = Connect("w1", 1);
  held_ = store_->HoldNextWrite();
  absl::StatusOr<v1::Job> submitted;
  std::thread writer([&] { submitted = manager_->Submit(Spec(1), "alice"); });
  held_->entered.WaitForNotification();  // CreateJob is in the store
  v1::Job seen;
  std::vector<v1::Job> listed;
  const bool returned = ReadersReturn("job-1", w1.id, &seen, &listed);
  writer.join();
  EXPECT_TRUE(returned);
  EXPECT_THAT(listed, IsEmpty()) << "a job is visible only once its row is committed";
  ASSERT_TRUE(submitted.ok()) << submitted.status();
  EXPECT_EQ(submitted->id(), "job-1");
  EXPECT_EQ(StoredJob("job-1").id(), "job-1");
}

TEST_F(CommitOrderTest, AssignGoesOutOnlyAfterTheScheduledStateIsCommitted) {
  Conn w1 = Connect("w1", 1);
  v1::JobSpec spec = Spec(1, 1, /*max_restarts=*/1);
  spec.mutable_restart()->set_backoff_s(0);  // placed again at once
  const std::string id = Submit(spec);
  const int put = IndexOf("put " + id + " SCHEDULED");
  const int event = IndexOf("append " + id + " seq 2..2");  // the SCHEDULED job_state
  const int assign = IndexOf("w1: assign " + id + " attempt 1");
  ASSERT_GE(put, 0) << ::testing::PrintToString(Journal());
  ASSERT_GE(event, 0) << ::testing::PrintToString(Journal());
  ASSERT_GE(assign, 0) << ::testing::PrintToString(Journal());
  EXPECT_LT(IndexOf("create " + id), put);
  EXPECT_LT(put, assign);
  EXPECT_LT(event, assign);

  // A restart: attempt 2's Assign follows its SCHEDULED row, which follows the
  // RESTARTING and PENDING rows.
  Report(w1, id, 1, {0}, v1::RankState::FAILED, "boom");
  auto journal = Journal();
  auto pos = [&](const std::string& line, int from) {
    for (size_t i = from; i < journal.size(); ++i) {
      if (journal[i] == line) return static_cast<int>(i);
    }
    return -1;
  };
  const int restarting = pos("put " + id + " RESTARTING", 0);
  const int pending = pos("put " + id + " PENDING", restarting);
  const int scheduled2 = pos("put " + id + " SCHEDULED", pending);
  const int assign2 = pos("w1: assign " + id + " attempt 2", 0);
  ASSERT_GE(restarting, 0) << ::testing::PrintToString(journal);
  EXPECT_LT(restarting, pending);
  EXPECT_LT(pending, scheduled2);
  EXPECT_LT(scheduled2, assign2);
}

TEST_F(CommitOrderTest, CancelReachesTheWorkerAfterTheCancelledStateIsCommitted) {
  Conn w1 = Connect("w1", 1);
  const std::string id = Submit(Spec(1));
  ASSERT_TRUE(manager_->Cancel(id, "stop").ok());
  const int put = IndexOf("put " + id + " CANCELLED");
  const int cancel = IndexOf("w1: cancel " + id + " attempt 1");
  ASSERT_GE(put, 0) << ::testing::PrintToString(Journal());
  ASSERT_GE(cancel, 0) << ::testing::PrintToString(Journal());
  EXPECT_LT(put, cancel);
}

TEST_F(CommitOrderTest, AFailedFollowUpWriteStopsTheUpdateBeforeAnyWorkerHearsOfIt) {
  Conn w1 = Connect("w1", 1);
  // Submit's own row commits; the SCHEDULED row that follows it fails.
  store_->FailNext(TestJobStore::Kind::kPut, absl::UnavailableError("disk full"));
  (void)manager_->Submit(Spec(1), "alice");
  EXPECT_THAT(w1.channel->Of(v1::ControllerMessage::kAssign), IsEmpty())
      << "an Assign went out for a placement the store does not hold";
  EXPECT_GE(IndexOf("lost write: disk full"), 0) << ::testing::PrintToString(Journal());
  EXPECT_LT(IndexOf("put job-1 SCHEDULED"), 0);
  EXPECT_EQ(StoredJob("job-1").state(), v1::Job::PENDING);  // what a restart recovers
}

}  // namespace
}  // namespace trainyard::testing
