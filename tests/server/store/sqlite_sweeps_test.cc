// SqliteJobStore's sweeps: a sweep and its children in one transaction, a failure in
// the middle of it (a trigger aborts the third job's insert) leaving nothing behind,
// the sweeps read back in order, and a job's newest event of a kind.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <filesystem>
#include <string>
#include <vector>

#include "server/store/sqlite_job_store.h"

namespace trainyard {
namespace {

class SqliteSweepsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("sweeps_store_test_" + std::to_string(::getpid()) + "_" +
                                                     ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  void Raw(const std::string& sql) {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open((dir_ / "trainyard.db").c_str(), &db), SQLITE_OK);
    char* error = nullptr;
    EXPECT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &error), SQLITE_OK) << (error ? error : "");
    sqlite3_free(error);
    sqlite3_close(db);
  }
  // `n` PENDING children, each with one JobStateChange event.
  static void Children(int n, std::vector<v1::Job>* jobs, std::vector<std::vector<v1::Event>>* events) {
    jobs->clear();
    events->clear();
    for (int i = 0; i < n; ++i) {
      v1::Job job;
      job.set_state(v1::Job::PENDING);
      job.set_sweep_index(i);
      jobs->push_back(job);
      v1::Event e;
      e.set_rank(-1);
      e.mutable_job_state()->set_state(v1::Job::PENDING);
      events->push_back({e});
    }
  }
  std::filesystem::path dir_;
};

TEST_F(SqliteSweepsTest, ASweepAndItsChildrenCommitTogether) {
  auto store = SqliteJobStore::Open(dir_.string());
  ASSERT_TRUE(store.ok()) << store.status();
  v1::Job alone;
  ASSERT_TRUE((*store)->CreateJob(&alone).ok());
  v1::Sweep sweep;
  sweep.set_name("grid");
  std::vector<v1::Job> jobs;
  std::vector<std::vector<v1::Event>> events;
  Children(3, &jobs, &events);
  ASSERT_TRUE((*store)->CreateSweep(&sweep, &jobs, &events).ok());
  EXPECT_EQ(sweep.id(), "sweep-1");
  ASSERT_EQ(sweep.job_ids_size(), 3);
  EXPECT_EQ(sweep.job_ids(0), "job-2");
  EXPECT_EQ(sweep.job_ids(2), "job-4");
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(jobs[i].sweep_id(), "sweep-1");
    ASSERT_EQ(events[i].size(), 1u);
    EXPECT_EQ(events[i][0].seq(), 1);
    EXPECT_EQ(events[i][0].job_id(), jobs[i].id());
    EXPECT_EQ((*store)->LastSeq(jobs[i].id()), 1);
  }
  store->reset();
  auto reopened = SqliteJobStore::Open(dir_.string());
  ASSERT_TRUE(reopened.ok());
  auto sweeps = (*reopened)->LoadSweeps();
  ASSERT_TRUE(sweeps.ok());
  ASSERT_EQ(sweeps->size(), 1u);
  EXPECT_EQ((*sweeps)[0].SerializeAsString(), sweep.SerializeAsString());
  auto loaded = (*reopened)->LoadJobs();
  ASSERT_TRUE(loaded.ok());
  ASSERT_EQ(loaded->size(), 4u);
  EXPECT_EQ((*loaded)[3].sweep_id(), "sweep-1");
  EXPECT_EQ((*loaded)[3].sweep_index(), 2);
}

TEST_F(SqliteSweepsTest, AFailureInTheMiddleLeavesNoSweepAndNoChild) {
  ASSERT_TRUE(SqliteJobStore::Open(dir_.string()).ok());
  // The third job row of a transaction aborts it, after two rows and their events.
  Raw("CREATE TRIGGER third_job BEFORE INSERT ON jobs WHEN (SELECT COUNT(*) FROM jobs) >= 2 "
      "BEGIN SELECT RAISE(ABORT, 'injected failure'); END;");
  auto store = SqliteJobStore::Open(dir_.string());
  ASSERT_TRUE(store.ok());
  v1::Sweep sweep;
  std::vector<v1::Job> jobs;
  std::vector<std::vector<v1::Event>> events;
  Children(5, &jobs, &events);
  absl::Status s = (*store)->CreateSweep(&sweep, &jobs, &events);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("injected failure"), std::string::npos) << s;
  EXPECT_TRUE(sweep.id().empty());
  EXPECT_EQ(sweep.job_ids_size(), 0);
  for (const v1::Job& job : jobs) EXPECT_TRUE(job.id().empty() && job.sweep_id().empty());
  EXPECT_TRUE((*store)->LoadJobs()->empty());
  EXPECT_TRUE((*store)->LoadSweeps()->empty());
  EXPECT_EQ((*store)->LastSeq("job-1"), 0);
  EXPECT_TRUE((*store)->ReadEvents("job-1", 1, 10)->empty());
  // Without the trigger the same sweep is stored, with the ids the failed one would have had.
  store->reset();
  Raw("DROP TRIGGER third_job;");
  auto again = SqliteJobStore::Open(dir_.string());
  ASSERT_TRUE(again.ok());
  Children(5, &jobs, &events);
  ASSERT_TRUE((*again)->CreateSweep(&sweep, &jobs, &events).ok());
  EXPECT_EQ(sweep.id(), "sweep-1");
  EXPECT_EQ((*again)->LoadJobs()->size(), 5u);
}

TEST_F(SqliteSweepsTest, TheNewestEventOfAKind) {
  auto store = SqliteJobStore::Open(dir_.string());
  ASSERT_TRUE(store.ok());
  v1::Job job;
  ASSERT_TRUE((*store)->CreateJob(&job).ok());
  auto none = (*store)->LastEventOfKind(job.id(), v1::Event::kValidation);
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
  std::vector<v1::Event> batch;
  for (int i = 1; i <= 4; ++i) {
    v1::Event e;
    e.set_attempt(1);
    e.set_source_seq(i);
    if (i % 2 == 1) {
      e.mutable_validation()->set_step(i * 10);
      e.mutable_validation()->set_loss(1.0 / i);
    } else {
      e.mutable_step_metrics()->set_step(i * 10);
    }
    batch.push_back(e);
  }
  ASSERT_TRUE((*store)->AppendEvents(job.id(), batch).ok());
  auto last = (*store)->LastEventOfKind(job.id(), v1::Event::kValidation);
  ASSERT_TRUE(last.ok());
  ASSERT_TRUE(last->has_value());
  EXPECT_EQ((*last)->validation().step(), 30);
  EXPECT_EQ((*last)->seq(), 3);
  EXPECT_FALSE((*store)->LastEventOfKind("job-77", v1::Event::kValidation)->has_value());
}

}  // namespace
}  // namespace trainyard
