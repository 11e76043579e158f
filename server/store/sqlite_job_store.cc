#include "server/store/sqlite_job_store.h"

#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "server/store/sqlite_schema.h"
#include "spdlog/spdlog.h"

namespace trainyard {

absl::StatusOr<std::unique_ptr<SqliteJobStore>> SqliteJobStore::Open(const std::string& data_dir) {
  std::error_code ec;
  std::filesystem::create_directories(data_dir, ec);
  if (ec) {
    return absl::FailedPreconditionError(
        absl::StrCat("--data-dir ", data_dir, ": ", ec.message()));
  }
  const std::string path = data_dir + "/trainyard.db";
  // The version is read before anything is written: a newer store is refused untouched.
  TY_ASSIGN_OR_RETURN(auto writer, SqliteDb::Open(path, /*configure=*/false));
  TY_ASSIGN_OR_RETURN(const int version, ReadSchemaVersion(*writer, path));
  TY_RETURN_IF_ERROR(CheckSchemaVersion(version, path));
  // Only a new file can get incremental auto-vacuum (SQLite fixes it with the first table).
  if (version == 0) TY_RETURN_IF_ERROR(writer->Exec("PRAGMA auto_vacuum = INCREMENTAL"));
  TY_RETURN_IF_ERROR(writer->Configure());
  std::unique_ptr<SqliteJobStore> store(new SqliteJobStore(std::move(writer)));
  TY_RETURN_IF_ERROR(store->InitSchema(path));
  // The reader opens once the schema exists.
  TY_ASSIGN_OR_RETURN(auto reader, SqliteDb::Open(path));
  absl::MutexLock lock(&store->read_mu_);
  store->reader_ = std::move(reader);
  return store;
}

absl::Status SqliteJobStore::InitSchema(const std::string& path) {
  absl::MutexLock lock(&write_mu_);
  int from = -1;
  TY_RETURN_IF_ERROR(MigrateSchema(*writer_, path, &from));
  if (from > 0) spdlog::info("store {}: migrated from schema version {} to {}", path, from, kSchemaVersion);
  return LoadCompactedLocked();
}

absl::StatusOr<std::vector<v1::Event>> SqliteJobStore::InsertJobLocked(v1::Job* job, std::vector<v1::Event>* events,
                                                                        int64_t* last) {
  TY_RETURN_IF_ERROR(writer_->Exec("INSERT INTO jobs (id) VALUES (NULL)"));
  int64_t num = sqlite3_last_insert_rowid(writer_->raw());
  job->set_id(absl::StrCat("job-", num));
  TY_ASSIGN_OR_RETURN(auto stmt, writer_->Prepare("UPDATE jobs SET id = ?1, state = ?2, data = ?3 WHERE num = ?4"));
  stmt.BindText(1, job->id());
  stmt.BindInt(2, job->state());
  stmt.BindBlob(3, job->SerializeAsString());
  stmt.BindInt(4, num);
  TY_RETURN_IF_ERROR(stmt.Run());
  *last = 0;
  if (events == nullptr || events->empty()) return std::vector<v1::Event>();
  return InsertEventsLocked(job->id(), std::move(*events), last);
}

absl::Status SqliteJobStore::CreateJob(v1::Job* job, std::vector<v1::Event>* events) {
  absl::MutexLock lock(&write_mu_);
  TY_RETURN_IF_ERROR(writer_->Exec("BEGIN IMMEDIATE"));
  int64_t last = 0;
  absl::StatusOr<std::vector<v1::Event>> inserted = InsertJobLocked(job, events, &last);
  absl::Status status = inserted.status();
  if (status.ok()) status = writer_->Exec("COMMIT");
  if (!status.ok()) {
    writer_->Exec("ROLLBACK").IgnoreError();
    job->clear_id();
    return status;
  }
  if (events != nullptr) *events = std::move(*inserted);
  SetCommittedSeq(job->id(), last);
  return absl::OkStatus();
}

absl::Status SqliteJobStore::PutJob(const v1::Job& job) {
  absl::MutexLock lock(&write_mu_);
  TY_ASSIGN_OR_RETURN(auto stmt, writer_->Prepare(
      "UPDATE jobs SET state = ?1, data = ?2, compacted = ?4 WHERE id = ?3"));
  stmt.BindInt(1, job.state());
  stmt.BindBlob(2, job.SerializeAsString());
  stmt.BindText(3, job.id());
  stmt.BindInt(4, job.has_compacted() ? 1 : 0);
  TY_RETURN_IF_ERROR(stmt.Run());
  if (writer_->Changes() != 1) {
    return absl::NotFoundError(absl::StrCat("job ", job.id(), " has no reserved row"));
  }
  // Committed: from now on the job's events read as compacted, whatever rows remain.
  if (job.has_compacted()) NoteCompacted(job);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<v1::Job>> SqliteJobStore::LoadJobs() {
  absl::MutexLock lock(&write_mu_);
  TY_ASSIGN_OR_RETURN(auto stmt,
                      writer_->Prepare("SELECT id, data FROM jobs WHERE data IS NOT NULL "
                                       "ORDER BY num"));
  std::vector<v1::Job> jobs;
  while (true) {
    TY_ASSIGN_OR_RETURN(bool row, stmt.Step());
    if (!row) break;
    v1::Job job;
    if (!job.ParseFromString(stmt.ColumnBlob(1))) {
      return absl::DataLossError(absl::StrCat("job ", stmt.ColumnText(0), ": corrupt row"));
    }
    jobs.push_back(std::move(job));
  }
  return jobs;
}

absl::StatusOr<int64_t> SqliteJobStore::LastSeqForWriteLocked(const std::string& job_id) {
  {
    absl::MutexLock lock(&seq_mu_);
    auto it = last_seq_.find(job_id);
    if (it != last_seq_.end()) return it->second;
  }
  TY_ASSIGN_OR_RETURN(auto stmt, writer_->Prepare(
      "SELECT COALESCE(MAX(seq), 0) FROM events WHERE job_id = ?1"));
  stmt.BindText(1, job_id);
  TY_ASSIGN_OR_RETURN(bool row, stmt.Step());
  const int64_t last = row ? stmt.ColumnInt(0) : 0;
  SetCommittedSeq(job_id, last);
  return last;
}

void SqliteJobStore::SetCommittedSeq(const std::string& job_id, int64_t seq) {
  absl::MutexLock lock(&seq_mu_);
  last_seq_[job_id] = seq;
}

absl::StatusOr<std::vector<v1::Event>> SqliteJobStore::InsertEventsLocked(
    const std::string& job_id, std::vector<v1::Event> events, int64_t* last) {
  TY_ASSIGN_OR_RETURN(auto stmt, writer_->Prepare(
      "INSERT OR IGNORE INTO events (job_id, seq, attempt, rank, source_seq, data, kind) "
      "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)"));
  std::vector<v1::Event> inserted;
  int64_t seq = *last;
  for (auto& event : events) {
    event.set_job_id(job_id);
    event.set_seq(seq + 1);
    stmt.Reset();
    stmt.BindText(1, job_id);
    stmt.BindInt(2, seq + 1);
    stmt.BindInt(3, event.attempt());
    stmt.BindInt(4, event.rank());
    if (event.source_seq() > 0) {
      stmt.BindInt(5, event.source_seq());
    } else {
      stmt.BindNull(5);  // controller events: never deduplicated
    }
    stmt.BindBlob(6, event.SerializeAsString());
    stmt.BindInt(7, static_cast<int>(event.payload_case()));
    TY_RETURN_IF_ERROR(stmt.Run());
    if (writer_->Changes() == 1) {
      ++seq;
      inserted.push_back(std::move(event));
    }
  }
  *last = seq;
  return inserted;
}

absl::StatusOr<std::vector<v1::Event>> SqliteJobStore::AppendEvents(const std::string& job_id,
                                                              std::vector<v1::Event> events) {
  absl::MutexLock lock(&write_mu_);
  TY_ASSIGN_OR_RETURN(int64_t last, LastSeqForWriteLocked(job_id));
  TY_RETURN_IF_ERROR(writer_->Exec("BEGIN IMMEDIATE"));
  auto committed = InsertEventsLocked(job_id, std::move(events), &last);
  absl::Status status = committed.status();
  if (status.ok()) status = writer_->Exec("COMMIT");
  if (!status.ok()) {
    writer_->Exec("ROLLBACK").IgnoreError();
    return status;
  }
  SetCommittedSeq(job_id, last);
  return committed;
}

absl::StatusOr<std::vector<v1::Event>> SqliteJobStore::ReadEvents(const std::string& job_id,
                                                            int64_t from_seq, int limit) {
  TY_RETURN_IF_ERROR(CompactedError(job_id));
  absl::MutexLock lock(&read_mu_);
  TY_ASSIGN_OR_RETURN(auto stmt, reader_->Prepare("SELECT data FROM events WHERE job_id = ?1 "
                                                  "AND seq >= ?2 ORDER BY seq LIMIT ?3"));
  stmt.BindText(1, job_id);
  stmt.BindInt(2, from_seq);
  stmt.BindInt(3, limit);
  std::vector<v1::Event> out;
  while (true) {
    TY_ASSIGN_OR_RETURN(bool row, stmt.Step());
    if (!row) break;
    v1::Event event;
    if (!event.ParseFromString(stmt.ColumnBlob(0))) {
      return absl::DataLossError(absl::StrCat("job ", job_id, ": corrupt event row"));
    }
    out.push_back(std::move(event));
  }
  return out;
}

int64_t SqliteJobStore::LastSeq(const std::string& job_id) {
  {
    absl::MutexLock lock(&seq_mu_);
    auto it = last_seq_.find(job_id);
    if (it != last_seq_.end()) return it->second;
    auto compacted = compacted_.find(job_id);
    if (compacted != compacted_.end()) return compacted->second.last_seq();
  }
  // Not written since the store opened: ask the reader (not cached here, so the cache
  // only ever holds values a writer committed).
  absl::MutexLock lock(&read_mu_);
  auto stmt = reader_->Prepare("SELECT COALESCE(MAX(seq), 0) FROM events WHERE job_id = ?1");
  if (!stmt.ok()) return 0;
  stmt->BindText(1, job_id);
  auto row = stmt->Step();
  return row.ok() && *row ? stmt->ColumnInt(0) : 0;
}

absl::Status SqliteJobStore::PutCordon(const std::string& worker, bool cordoned, const std::string& reason) {
  absl::MutexLock lock(&write_mu_);
  TY_ASSIGN_OR_RETURN(auto stmt, writer_->Prepare(cordoned ? "INSERT OR REPLACE INTO worker_cordons (name, reason) "
                                                             "VALUES (?1, ?2)"
                                                           : "DELETE FROM worker_cordons WHERE name = ?1"));
  stmt.BindText(1, worker);
  if (cordoned) stmt.BindText(2, reason);
  return stmt.Run();
}

absl::StatusOr<std::map<std::string, std::string>> SqliteJobStore::LoadCordons() {
  absl::MutexLock lock(&write_mu_);
  TY_ASSIGN_OR_RETURN(auto stmt, writer_->Prepare("SELECT name, reason FROM worker_cordons"));
  std::map<std::string, std::string> out;
  while (true) {
    TY_ASSIGN_OR_RETURN(bool row, stmt.Step());
    if (!row) break;
    out[stmt.ColumnText(0)] = stmt.ColumnText(1);
  }
  return out;
}

absl::Status SqliteJobStore::SaveUsage(const std::map<std::string, StoredUsage>& usage) {
  absl::MutexLock lock(&write_mu_);
  TY_RETURN_IF_ERROR(writer_->Exec("BEGIN IMMEDIATE"));
  auto body = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_) -> absl::Status {
    TY_RETURN_IF_ERROR(writer_->Exec("DELETE FROM owner_usage"));
    TY_ASSIGN_OR_RETURN(auto stmt, writer_->Prepare(
        "INSERT INTO owner_usage (owner, slot_seconds, as_of_ms) VALUES (?1, ?2, ?3)"));
    for (const auto& [owner, u] : usage) {
      stmt.Reset();
      stmt.BindText(1, owner);
      stmt.BindDouble(2, u.slot_seconds);
      stmt.BindInt(3, u.as_of_unix_ms);
      TY_RETURN_IF_ERROR(stmt.Run());
    }
    return absl::OkStatus();
  };
  absl::Status status = body();
  if (status.ok()) status = writer_->Exec("COMMIT");
  if (!status.ok()) writer_->Exec("ROLLBACK").IgnoreError();
  return status;
}

absl::StatusOr<std::map<std::string, StoredUsage>> SqliteJobStore::LoadUsage() {
  absl::MutexLock lock(&write_mu_);
  TY_ASSIGN_OR_RETURN(auto stmt, writer_->Prepare("SELECT owner, slot_seconds, as_of_ms FROM owner_usage"));
  std::map<std::string, StoredUsage> out;
  while (true) {
    TY_ASSIGN_OR_RETURN(bool row, stmt.Step());
    if (!row) break;
    out[stmt.ColumnText(0)] = StoredUsage{stmt.ColumnDouble(1), stmt.ColumnInt(2)};
  }
  return out;
}

}  // namespace trainyard
