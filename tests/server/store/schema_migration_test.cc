// Schema versions of trainyard.db: a store written before versions were recorded
// (version 1) is migrated; newer, negative or unreadable ones are refused untouched.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "server/store/sqlite_job_store.h"
#include "server/store/sqlite_schema.h"

namespace trainyard {
namespace {

// Today's (version 1) tables, as the release before schema versions created them.
constexpr char kV1Tables[] = R"sql(
  CREATE TABLE jobs (num INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT UNIQUE,
                     state INTEGER NOT NULL DEFAULT 0, data BLOB);
  CREATE TABLE events (job_id TEXT NOT NULL, seq INTEGER NOT NULL, attempt INTEGER NOT NULL,
                       rank INTEGER NOT NULL, source_seq INTEGER, data BLOB NOT NULL,
                       PRIMARY KEY (job_id, seq));
  CREATE UNIQUE INDEX events_source ON events (job_id, attempt, rank, source_seq);
  CREATE TABLE worker_cordons (name TEXT PRIMARY KEY, reason TEXT NOT NULL);
  CREATE TABLE owner_usage (owner TEXT PRIMARY KEY, slot_seconds REAL NOT NULL, as_of_ms INTEGER NOT NULL);
)sql";

class SchemaMigrationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("schema_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string DbPath() const { return (dir_ / "trainyard.db").string(); }

  // Runs `sql` on the file through a plain SQLite connection (no trainyard code).
  void Raw(const std::string& sql) {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(DbPath().c_str(), &db), SQLITE_OK);
    char* err = nullptr;
    const int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err);
    const std::string msg = err ? err : "";
    sqlite3_free(err);
    sqlite3_close(db);
    ASSERT_EQ(rc, SQLITE_OK) << msg;
  }
  int64_t RawInt(const std::string& sql) {
    sqlite3* db = nullptr;
    EXPECT_EQ(sqlite3_open(DbPath().c_str(), &db), SQLITE_OK);
    sqlite3_stmt* stmt = nullptr;
    EXPECT_EQ(sqlite3_prepare_v2(db, sql.c_str(), -1, &stmt, nullptr), SQLITE_OK) << sqlite3_errmsg(db);
    int64_t out = -999;
    if (sqlite3_step(stmt) == SQLITE_ROW) out = sqlite3_column_int64(stmt, 0);
    sqlite3_finalize(stmt);
    sqlite3_close(db);
    return out;
  }
  // Inserts a row with a bound blob through a plain connection.
  void RawInsert(const std::string& sql, const std::vector<std::string>& texts, const std::string& blob) {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(DbPath().c_str(), &db), SQLITE_OK);
    sqlite3_stmt* stmt = nullptr;
    ASSERT_EQ(sqlite3_prepare_v2(db, sql.c_str(), -1, &stmt, nullptr), SQLITE_OK) << sqlite3_errmsg(db);
    int i = 1;
    for (const auto& t : texts) sqlite3_bind_text(stmt, i++, t.c_str(), -1, SQLITE_TRANSIENT);
    sqlite3_bind_blob(stmt, i, blob.data(), static_cast<int>(blob.size()), SQLITE_TRANSIENT);
    EXPECT_EQ(sqlite3_step(stmt), SQLITE_DONE) << sqlite3_errmsg(db);
    sqlite3_finalize(stmt);
    sqlite3_close(db);
  }
  std::string Bytes() const {
    std::ifstream in(DbPath(), std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  std::filesystem::path dir_;
};

// The events of the hand-made version-1 store: one of each kind recovery cares about,
// step metrics, a log line. Their payload field numbers (event.proto) are written out.
std::vector<v1::Event> V1Events() {
  std::vector<v1::Event> out(5);
  out[0].set_rank(-1);
  out[0].mutable_job_state()->set_state(v1::Job::SCHEDULED);  // field 16
  out[1].set_rank(0);
  out[1].mutable_rank_state()->set_worker("w1");  // field 12
  out[2].set_rank(0);
  out[2].mutable_step_metrics()->set_step(7);  // field 10
  out[3].set_rank(0);
  out[3].mutable_checkpoint()->set_step(7);  // field 17
  out[4].set_rank(0);
  out[4].mutable_log()->set_message("hello");  // field 13
  for (int i = 0; i < 5; ++i) {
    out[i].set_job_id("job-1");
    out[i].set_seq(i + 1);
    out[i].set_attempt(1);
    if (out[i].rank() >= 0) out[i].set_source_seq(i);
  }
  return out;
}

TEST_F(SchemaMigrationTest, AVersionOneStoreIsMigratedWithItsDataIntact) {
  Raw(std::string("PRAGMA journal_mode=WAL;") + kV1Tables);
  v1::Job job;
  job.set_id("job-1");
  job.set_state(v1::Job::RUNNING);
  job.set_owner("alice");
  job.set_attempt(1);
  RawInsert("INSERT INTO jobs (id, state, data) VALUES (?1, 3, ?2)", {"job-1"}, job.SerializeAsString());
  for (const v1::Event& e : V1Events()) {
    RawInsert("INSERT INTO events (job_id, seq, attempt, rank, source_seq, data) VALUES ('job-1', " +
                  std::to_string(e.seq()) + ", 1, " + std::to_string(e.rank()) + ", " +
                  (e.source_seq() > 0 ? std::to_string(e.source_seq()) : "NULL") + ", ?1)",
              {}, e.SerializeAsString());
  }
  // A finished job's events are not classified by the migration (never read by kind).
  v1::Job done;
  done.set_id("job-2");
  done.set_state(v1::Job::SUCCEEDED);
  RawInsert("INSERT INTO jobs (id, state, data) VALUES (?1, 4, ?2)", {"job-2"}, done.SerializeAsString());
  v1::Event old_step = V1Events()[2];
  old_step.set_job_id("job-2");
  old_step.set_seq(1);
  RawInsert("INSERT INTO events (job_id, seq, attempt, rank, source_seq, data) VALUES ('job-2', 1, 1, 0, 1, ?1)",
            {}, old_step.SerializeAsString());
  ASSERT_EQ(RawInt("PRAGMA user_version"), 0);

  {
    auto store = SqliteJobStore::Open(dir_.string());
    ASSERT_TRUE(store.ok()) << store.status();
    auto jobs = (*store)->LoadJobs();
    ASSERT_TRUE(jobs.ok());
    ASSERT_EQ(jobs->size(), 2u);
    EXPECT_EQ((*jobs)[0].SerializeAsString(), job.SerializeAsString());
    auto events = (*store)->ReadEvents("job-1", 1, 100);
    ASSERT_TRUE(events.ok()) << events.status();
    const std::vector<v1::Event> want = V1Events();
    ASSERT_EQ(events->size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_EQ((*events)[i].SerializeAsString(), want[i].SerializeAsString()) << i;
    }
    EXPECT_EQ((*store)->LastSeq("job-1"), 5);
    // Appends go on after the migrated log, and a resend of a v1 event is still dropped.
    v1::Event resend = want[2];
    resend.clear_seq();
    v1::Event fresh;
    fresh.set_rank(0);
    fresh.set_attempt(1);
    fresh.set_source_seq(10);
    fresh.mutable_step_metrics()->set_step(8);
    auto appended = (*store)->AppendEvents("job-1", {resend, fresh});
    ASSERT_TRUE(appended.ok());
    ASSERT_EQ(appended->size(), 1u);
    EXPECT_EQ((*appended)[0].seq(), 6);
  }
  EXPECT_EQ(RawInt("PRAGMA user_version"), kSchemaVersion);
  // The backfilled kinds, against the payload field numbers of event.proto.
  const int64_t want_kinds[] = {16, 12, 10, 17, 13, 10};
  for (int seq = 1; seq <= 6; ++seq) {
    EXPECT_EQ(RawInt("SELECT kind FROM events WHERE job_id = 'job-1' AND seq = " + std::to_string(seq)),
              want_kinds[seq - 1])
        << "seq " << seq;
  }
  EXPECT_EQ(RawInt("SELECT kind FROM events WHERE job_id = 'job-2' AND seq = 1"), 0);
  // A second open finds the current version and migrates nothing again.
  ASSERT_TRUE(SqliteJobStore::Open(dir_.string()).ok());
  EXPECT_EQ(RawInt("SELECT COUNT(*) FROM events"), 7);
}

TEST_F(SchemaMigrationTest, ANewStoreGetsTheCurrentVersionAndIncrementalVacuum) {
  ASSERT_TRUE(SqliteJobStore::Open(dir_.string()).ok());
  EXPECT_EQ(RawInt("PRAGMA user_version"), kSchemaVersion);
  EXPECT_EQ(RawInt("PRAGMA auto_vacuum"), 2);  // INCREMENTAL
}

TEST_F(SchemaMigrationTest, ANewerStoreIsRefusedNamingBothVersionsAndLeftByteIdentical) {
  {
    auto store = SqliteJobStore::Open(dir_.string());
    ASSERT_TRUE(store.ok());
    v1::Job job;
    ASSERT_TRUE((*store)->CreateJob(&job).ok());
  }
  Raw("PRAGMA user_version = " + std::to_string(kSchemaVersion + 1) + "; PRAGMA journal_mode=DELETE;");
  const std::string before = Bytes();
  ASSERT_FALSE(before.empty());
  auto store = SqliteJobStore::Open(dir_.string());
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kFailedPrecondition);
  const std::string msg(store.status().message());
  EXPECT_NE(msg.find("schema version " + std::to_string(kSchemaVersion + 1)), std::string::npos) << msg;
  EXPECT_NE(msg.find("this trainyard-controller's " + std::to_string(kSchemaVersion)), std::string::npos) << msg;
  EXPECT_EQ(Bytes(), before);
  EXPECT_FALSE(std::filesystem::exists(DbPath() + "-wal"));
}

TEST_F(SchemaMigrationTest, ANegativeVersionIsRefusedAsDamaged) {
  Raw(std::string(kV1Tables) + "PRAGMA user_version = -3;");
  const std::string before = Bytes();
  auto store = SqliteJobStore::Open(dir_.string());
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(store.status().message().find("schema version -3"), std::string::npos) << store.status();
  EXPECT_EQ(Bytes(), before);
}

TEST_F(SchemaMigrationTest, AFileThatIsNoDatabaseIsRefusedAndLeftAsItIs) {
  {
    std::ofstream out(DbPath(), std::ios::binary);
    for (int i = 0; i < 200; ++i) out << "garbage, not SQLite ";
  }
  const std::string before = Bytes();
  auto store = SqliteJobStore::Open(dir_.string());
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(store.status().message().find("not a readable trainyard store"), std::string::npos) << store.status();
  EXPECT_EQ(Bytes(), before);
}

}  // namespace
}  // namespace trainyard
