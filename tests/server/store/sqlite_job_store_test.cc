#include "server/store/sqlite_job_store.h"

#include <gtest/gtest.h>

#include <filesystem>

namespace trainyard {
namespace {

class SqliteJobStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("job_store_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::filesystem::path dir_;
};

v1::Event StepEvent(int rank, int64_t source_seq, int64_t step) {
  v1::Event e;
  e.set_rank(rank);
  e.set_attempt(1);
  e.set_source_seq(source_seq);
  e.mutable_step_metrics()->set_step(step);
  return e;
}

TEST_F(SqliteJobStoreTest, AssignsSequentialSeqsAndDropsResends) {
  auto store = SqliteJobStore::Open(dir_.string());
  ASSERT_TRUE(store.ok()) << store.status();
  v1::Job job;
  job.set_state(v1::Job::PENDING);
  ASSERT_TRUE((*store)->CreateJob(&job).ok());
  EXPECT_EQ(job.id(), "job-1");

  auto first = (*store)->AppendEvents(job.id(), {StepEvent(0, 1, 1), StepEvent(1, 1, 1)});
  ASSERT_TRUE(first.ok());
  ASSERT_EQ(first->size(), 2u);
  EXPECT_EQ((*first)[0].seq(), 1);
  EXPECT_EQ((*first)[1].seq(), 2);
  // A worker resending after a reconnect: the repeat is dropped, the new one appended.
  auto second = (*store)->AppendEvents(job.id(), {StepEvent(0, 1, 1), StepEvent(0, 2, 2)});
  ASSERT_TRUE(second.ok());
  ASSERT_EQ(second->size(), 1u);
  EXPECT_EQ((*second)[0].seq(), 3);
  EXPECT_EQ((*second)[0].step_metrics().step(), 2);
  // Controller events (source_seq 0) are never deduplicated.
  v1::Event state;
  state.mutable_job_state()->set_state(v1::Job::RUNNING);
  ASSERT_EQ((*store)->AppendEvents(job.id(), {state, state})->size(), 2u);
  EXPECT_EQ((*store)->LastSeq(job.id()), 5);

  auto tail = (*store)->ReadEvents(job.id(), 3, 10);
  ASSERT_TRUE(tail.ok());
  ASSERT_EQ(tail->size(), 3u);
  EXPECT_EQ((*tail)[0].seq(), 3);
  EXPECT_EQ((*tail)[2].seq(), 5);
}

TEST_F(SqliteJobStoreTest, SurvivesReopen) {
  {
    auto store = SqliteJobStore::Open(dir_.string());
    ASSERT_TRUE(store.ok());
    v1::Job job;
    job.set_state(v1::Job::RUNNING);
    job.mutable_spec()->mutable_job()->set_name("keep-me");
    ASSERT_TRUE((*store)->CreateJob(&job).ok());
    ASSERT_TRUE((*store)->AppendEvents(job.id(), {StepEvent(0, 1, 1)}).ok());
    job.set_state(v1::Job::SUCCEEDED);
    ASSERT_TRUE((*store)->PutJob(job).ok());
  }
  auto store = SqliteJobStore::Open(dir_.string());
  ASSERT_TRUE(store.ok());
  auto jobs = (*store)->LoadJobs();
  ASSERT_TRUE(jobs.ok());
  ASSERT_EQ(jobs->size(), 1u);
  EXPECT_EQ((*jobs)[0].state(), v1::Job::SUCCEEDED);
  EXPECT_EQ((*jobs)[0].spec().job().name(), "keep-me");
  EXPECT_EQ((*store)->LastSeq("job-1"), 1);
  // New ids continue after the old ones; seqs continue too.
  v1::Job next;
  ASSERT_TRUE((*store)->CreateJob(&next).ok());
  EXPECT_EQ(next.id(), "job-2");
  auto more = (*store)->AppendEvents("job-1", {StepEvent(0, 2, 2)});
  ASSERT_TRUE(more.ok());
  EXPECT_EQ((*more)[0].seq(), 2);
}

TEST_F(SqliteJobStoreTest, PutJobOfUnknownIdFails) {
  auto store = SqliteJobStore::Open(dir_.string());
  ASSERT_TRUE(store.ok());
  v1::Job job;
  job.set_id("job-99");
  EXPECT_EQ((*store)->PutJob(job).code(), absl::StatusCode::kNotFound);
}

TEST(JobStoreOpenTest, UnwritableDirIsAPreciseError) {
  auto store = SqliteJobStore::Open("/proc/trainyard-cannot-exist");
  ASSERT_FALSE(store.ok());
  EXPECT_NE(store.status().message().find("/proc/trainyard-cannot-exist"), std::string::npos);
}

}  // namespace
}  // namespace trainyard
