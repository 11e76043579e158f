// Retention (--retain-finished): finished jobs' events compacted after the retention,
// the row kept as the summary, reads that say so, a pass cut off mid-way finished by
// the next, the flag's parsing. A fake clock moves time; nothing sleeps.
#include "server/state/event_compaction.h"

#include <gtest/gtest.h>
#include <sqlite3.h>

#include "common/proto_time.h"
#include "tests/server/state/manager_fixture.h"

namespace trainyard::testing {
namespace {

class RetentionTest : public ManagerFixture {
 protected:
  RetentionOptions Options(const std::string& retain = "30d") {
    RetentionOptions options;
    auto parsed = ParseRetainFinished(retain);
    EXPECT_TRUE(parsed.ok()) << parsed.status();
    options.retain = *parsed;
    options.delete_chunk = 100;  // several delete transactions per job
    return options;
  }
  RetentionCompactor::Pass RunPass(const RetentionOptions& options) {
    RetentionCompactor compactor(manager_.get(), db_.get(), &metrics_, &clock_, options);
    auto pass = compactor.RunOnce();
    EXPECT_TRUE(pass.ok()) << pass.status();
    return pass.ok() ? *pass : RetentionCompactor::Pass{-1, -1, -1};
  }
  // Rows of `id` in the events table, counted with plain SQLite.
  int64_t Rows(const std::string& id) {
    sqlite3* db = nullptr;
    EXPECT_EQ(sqlite3_open((std::string(dir_.path()) + "/trainyard.db").c_str(), &db), SQLITE_OK);
    sqlite3_stmt* stmt = nullptr;
    sqlite3_prepare_v2(db, "SELECT COUNT(*) FROM events WHERE job_id = ?1", -1, &stmt, nullptr);
    sqlite3_bind_text(stmt, 1, id.c_str(), -1, SQLITE_TRANSIENT);
    int64_t n = -1;
    if (sqlite3_step(stmt) == SQLITE_ROW) n = sqlite3_column_int64(stmt, 0);
    sqlite3_finalize(stmt);
    sqlite3_close(db);
    return n;
  }
  // A one-rank job on `w` that reports `steps` steps and exits: SUCCEEDED and settled.
  std::string FinishedJob(const Conn& w, int steps) {
    const std::string id = Submit(Spec(1));
    Report(w, id, 1, {0}, v1::RankState::RUNNING);
    for (int s = 1; s <= steps; s += 50) {
      std::vector<v1::Event> batch;
      for (int k = s; k < s + 50 && k <= steps; ++k) {
        v1::Event e;
        e.set_job_id(id);
        e.set_attempt(1);
        e.set_rank(0);
        e.set_source_seq(1000 + k);
        e.mutable_step_metrics()->set_step(k);
        e.mutable_step_metrics()->set_loss(2.0);
        for (int x = 0; x < 16; ++x) e.mutable_step_metrics()->add_expert_load(4096 + x);
        batch.push_back(std::move(e));
      }
      Send(w, std::move(batch));
    }
    Report(w, id, 1, {0}, v1::RankState::EXITED);
    EXPECT_EQ(Job(id).state(), v1::Job::SUCCEEDED);
    return id;
  }
};

TEST_F(RetentionTest, AFinishedJobIsCompactedOnlyAfterTheRetentionAndReadsSaySo) {
  Conn w1 = Connect("w1", 2);
  const std::string done = FinishedJob(w1, 600);
  const std::string running = Submit(Spec(1));
  Report(w1, running, 1, {0}, v1::RankState::RUNNING);
  const int64_t done_events = static_cast<int64_t>(Stored(done).size());
  const int64_t running_events = static_cast<int64_t>(Stored(running).size());
  ASSERT_GT(done_events, 600);
  ASSERT_EQ(Rows(done), done_events);
  const v1::Job before = StoredJob(done);

  clock_.Advance(absl::Hours(24 * 30) - absl::Seconds(1));  // not yet 30 days since it ended
  RetentionCompactor::Pass pass = RunPass(Options());
  EXPECT_EQ(pass.jobs, 0);
  EXPECT_EQ(Rows(done), done_events);

  clock_.Advance(absl::Seconds(2));
  const absl::Time at = clock_.Now();
  pass = RunPass(Options());
  EXPECT_EQ(pass.jobs, 1);
  EXPECT_EQ(pass.events, done_events);
  EXPECT_GT(pass.pages, 0);  // a new store has incremental vacuum
  EXPECT_EQ(Rows(done), 0);
  EXPECT_EQ(Rows(running), running_events);  // a running job is never touched
  auto stats = db_->GetStats();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->free_pages, 0);

  // The row keeps the summary and says when and how much.
  const v1::Job job = Job(done);
  EXPECT_EQ(job.state(), v1::Job::SUCCEEDED);
  ASSERT_TRUE(job.has_compacted());
  EXPECT_EQ(job.compacted().events_removed(), done_events);
  EXPECT_EQ(job.compacted().last_seq(), done_events);
  EXPECT_EQ(job.compacted().retain_finished(), "30d");
  EXPECT_EQ(FromProtoTime(job.compacted().time()), at);
  v1::Job stored = StoredJob(done);
  EXPECT_TRUE(stored.has_compacted());
  stored.clear_compacted();
  EXPECT_EQ(stored.SerializeAsString(), before.SerializeAsString());  // nothing else changed

  // Event reads (WatchJob, the web API) answer FAILED_PRECONDITION, naming the date.
  auto events = db_->ReadEvents(done, 1, 10);
  ASSERT_FALSE(events.ok());
  EXPECT_EQ(events.status().code(), absl::StatusCode::kFailedPrecondition);
  const std::string want = done + "'s events were compacted on " +
                           absl::FormatTime("%Y-%m-%d %H:%M:%SZ", at, absl::UTCTimeZone()) +
                           " after --retain-finished 30d";
  EXPECT_NE(events.status().message().find(want), std::string::npos) << events.status();
  EXPECT_EQ(db_->LastSeq(done), done_events);
  EXPECT_EQ(Counter("trainyard_store_compacted_jobs_total"), 1);
  EXPECT_EQ(Counter("trainyard_store_compacted_events_total"), static_cast<double>(done_events));

  // A restarted controller sees the same; a second pass finds nothing to do.
  Restart();
  EXPECT_TRUE(Job(done).has_compacted());
  EXPECT_EQ(Job(done).last_seq(), done_events);
  EXPECT_EQ(db_->ReadEvents(done, 1, 10).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(Job(running).state(), v1::Job::RUNNING);
  pass = RunPass(Options());
  EXPECT_EQ(pass.jobs, 0);
  EXPECT_EQ(pass.events, 0);
}

TEST_F(RetentionTest, ForeverAndZeroNeverCompact) {
  Conn w1 = Connect("w1", 1);
  const std::string done = FinishedJob(w1, 10);
  const int64_t rows = Rows(done);
  clock_.Advance(absl::Hours(24 * 365 * 50));
  EXPECT_EQ(RunPass(Options("forever")).jobs, 0);
  EXPECT_EQ(RunPass(Options("0")).jobs, 0);
  EXPECT_EQ(Rows(done), rows);
  EXPECT_FALSE(Job(done).has_compacted());
}

TEST_F(RetentionTest, APassCutOffAfterTheMarkIsFinishedByTheNextOne) {
  Conn w1 = Connect("w1", 1);
  const std::string done = FinishedJob(w1, 300);
  const int64_t rows = Rows(done);
  clock_.Advance(absl::Hours(24 * 31));
  // The compactor's first step, then one chunk of deletes, then the process dies.
  v1::Compaction c;
  *c.mutable_time() = ToProtoTime(clock_.Now());
  c.set_retain_finished("30d");
  ASSERT_TRUE(manager_->MarkCompacted(done, c).ok());
  auto deleted = db_->DeleteCompactedEvents(done, 50);
  ASSERT_TRUE(deleted.ok());
  ASSERT_EQ(*deleted, 50);
  Restart();
  // Compacted from the outside already: the marker is the commit point.
  EXPECT_TRUE(Job(done).has_compacted());
  EXPECT_EQ(db_->ReadEvents(done, 1, 10).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(Rows(done), rows - 50);
  RetentionCompactor::Pass pass = RunPass(Options());
  EXPECT_EQ(pass.jobs, 0);  // not compacted twice
  EXPECT_EQ(pass.events, rows - 50);
  EXPECT_EQ(Rows(done), 0);
  EXPECT_EQ(Job(done).compacted().events_removed(), rows);
}

TEST_F(RetentionTest, AMarkThatFailsToCommitLeavesTheJobUntouched) {
  Conn w1 = Connect("w1", 1);
  const std::string done = FinishedJob(w1, 100);
  const int64_t rows = Rows(done);
  clock_.Advance(absl::Hours(24 * 31));
  store_->FailNext(TestJobStore::Kind::kPut, absl::UnavailableError("disk full"));
  RetentionCompactor::Pass pass = RunPass(Options());
  EXPECT_EQ(pass.jobs, 0);
  EXPECT_EQ(Rows(done), rows);
  EXPECT_FALSE(Job(done).has_compacted());
  EXPECT_FALSE(StoredJob(done).has_compacted());
  EXPECT_EQ(Stored(done).size(), static_cast<size_t>(rows));
  // Deleting a job that is not compacted is refused outright.
  EXPECT_EQ(db_->DeleteCompactedEvents(done, 10).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(Rows(done), rows);
  // The next pass compacts it.
  EXPECT_EQ(RunPass(Options()).jobs, 1);
  EXPECT_EQ(Rows(done), 0);
}

TEST(RetainFinishedFlag, ParsesDurationsAndRefusesTheRest) {
  auto d30 = ParseRetainFinished("30d");
  ASSERT_TRUE(d30.ok());
  EXPECT_EQ(d30->keep, absl::Hours(720));
  EXPECT_EQ(d30->text, "30d");
  EXPECT_EQ(ParseRetainFinished("1.5h")->keep, absl::Minutes(90));
  EXPECT_EQ(ParseRetainFinished("90m")->keep, absl::Minutes(90));
  EXPECT_EQ(ParseRetainFinished("3600s")->keep, absl::Hours(1));
  EXPECT_EQ(ParseRetainFinished("forever")->keep, absl::InfiniteDuration());
  EXPECT_EQ(ParseRetainFinished("0")->keep, absl::InfiniteDuration());
  for (const char* bad : {"-1d", "0d", "30", "30x", "", "d", "abcd", "nand", "infd", "99999999d", "1e300s"}) {
    auto parsed = ParseRetainFinished(bad);
    EXPECT_FALSE(parsed.ok()) << bad;
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

}  // namespace
}  // namespace trainyard::testing
