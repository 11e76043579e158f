// SqliteJobStore::ReadRecoveryEvents reads the kinds JobStateMachine::Recover uses and a
// tail of the current attempt's step metrics, through the events_recovery index.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "server/store/sqlite_job_store.h"

namespace trainyard {
namespace {

class RecoveryReadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("recovery_read_test_" + std::to_string(::getpid()) + "_" +
                                                     ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::filesystem::path dir_;
};

v1::Event Make(int attempt, int rank, int64_t source_seq) {
  v1::Event e;
  e.set_attempt(attempt);
  e.set_rank(rank);
  e.set_source_seq(source_seq);
  return e;
}

TEST_F(RecoveryReadTest, ReadsTheRareKindsOfEveryAttemptAndTheCurrentAttemptsStepTail) {
  auto store = SqliteJobStore::Open(dir_.string());
  ASSERT_TRUE(store.ok()) << store.status();
  v1::Job job;
  ASSERT_TRUE((*store)->CreateJob(&job).ok());
  std::vector<v1::Event> all;
  int64_t src = 0;
  for (int attempt = 1; attempt <= 2; ++attempt) {
    v1::Event scheduled = Make(attempt, -1, 0);
    scheduled.mutable_job_state()->set_state(v1::Job::SCHEDULED);
    all.push_back(scheduled);
    v1::Event running = Make(attempt, 0, ++src);
    running.mutable_rank_state()->set_worker("w1");
    all.push_back(running);
    for (int i = 0; i < 300; ++i) {
      v1::Event step = Make(attempt, i % 2, ++src);
      step.mutable_step_metrics()->set_step(i);
      all.push_back(step);
      if (i % 50 == 0) {
        v1::Event log = Make(attempt, 0, ++src);
        log.mutable_log()->set_message("line");
        all.push_back(log);
      }
    }
    v1::Event ck = Make(attempt, 0, ++src);
    ck.mutable_checkpoint()->set_step(100 * attempt);
    all.push_back(ck);
    if (attempt == 1) {
      v1::Event stall = Make(attempt, 1, ++src);
      stall.mutable_stall()->set_collective("all_reduce");
      all.push_back(stall);
      v1::Event restarting = Make(attempt, -1, 0);
      restarting.mutable_job_state()->set_state(v1::Job::RESTARTING);
      all.push_back(restarting);
    }
  }
  // A few of attempt 2's steps after its checkpoint, so the tail crosses other kinds.
  for (int i = 300; i < 310; ++i) {
    v1::Event step = Make(2, 0, ++src);
    step.mutable_step_metrics()->set_step(i);
    all.push_back(step);
  }
  auto committed = (*store)->AppendEvents(job.id(), all);
  ASSERT_TRUE(committed.ok());
  ASSERT_EQ(committed->size(), all.size());

  // Independently: filter the whole log.
  const int tail = 25;
  std::vector<int64_t> want;
  std::vector<int64_t> steps2;
  for (const v1::Event& e : *committed) {
    if (e.has_rank_state() || e.has_stall() || e.has_job_state() || e.has_checkpoint()) want.push_back(e.seq());
    if (e.has_step_metrics() && e.attempt() == 2) steps2.push_back(e.seq());
  }
  want.insert(want.end(), steps2.end() - tail, steps2.end());
  std::sort(want.begin(), want.end());

  auto read = (*store)->ReadRecoveryEvents(job.id(), 2, tail);
  ASSERT_TRUE(read.ok()) << read.status();
  std::vector<int64_t> got;
  for (const v1::Event& e : *read) got.push_back(e.seq());
  EXPECT_EQ(got, want);
  // The events come back whole.
  for (const v1::Event& e : *read) {
    EXPECT_EQ(e.SerializeAsString(), (*committed)[e.seq() - 1].SerializeAsString()) << e.seq();
  }
}

TEST_F(RecoveryReadTest, TheRareKindsAreReadThroughThePartialIndex) {
  ASSERT_TRUE(SqliteJobStore::Open(dir_.string()).ok());
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open((dir_ / "trainyard.db").c_str(), &db), SQLITE_OK);
  sqlite3_stmt* stmt = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(db,
                               "EXPLAIN QUERY PLAN SELECT data FROM events WHERE job_id = ?1 "
                               "AND kind IN (12, 15, 16, 17) ORDER BY seq",
                               -1, &stmt, nullptr),
            SQLITE_OK);
  std::string plan;
  while (sqlite3_step(stmt) == SQLITE_ROW) {
    plan += reinterpret_cast<const char*>(sqlite3_column_text(stmt, 3));
    plan += "\n";
  }
  sqlite3_finalize(stmt);
  sqlite3_close(db);
  EXPECT_NE(plan.find("events_recovery"), std::string::npos) << plan;
}

}  // namespace
}  // namespace trainyard
