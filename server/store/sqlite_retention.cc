// SqliteJobStore's retention side: compacted jobs, the chunked deletes of their events,
// the file's size and free pages, and incremental vacuum.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/base/status_macros.h"
#include "common/proto_time.h"
#include "server/store/sqlite_job_store.h"

namespace trainyard {

absl::Status SqliteJobStore::LoadCompactedLocked() {
  TY_ASSIGN_OR_RETURN(auto stmt, writer_->Prepare("SELECT id, data FROM jobs WHERE compacted = 1"));
  while (true) {
    TY_ASSIGN_OR_RETURN(bool row, stmt.Step());
    if (!row) return absl::OkStatus();
    v1::Job job;
    if (!job.ParseFromString(stmt.ColumnBlob(1))) {
      return absl::DataLossError(absl::StrCat("job ", stmt.ColumnText(0), ": corrupt row"));
    }
    NoteCompacted(job);
  }
}

void SqliteJobStore::NoteCompacted(const v1::Job& job) {
  absl::MutexLock lock(&seq_mu_);
  compacted_[job.id()] = job.compacted();
}

absl::Status SqliteJobStore::CompactedError(const std::string& job_id) {
  absl::MutexLock lock(&seq_mu_);
  auto it = compacted_.find(job_id);
  if (it == compacted_.end()) return absl::OkStatus();
  const v1::Compaction& c = it->second;
  return absl::FailedPreconditionError(absl::StrCat(
      job_id, "'s events were compacted on ",
      absl::FormatTime("%Y-%m-%d %H:%M:%SZ", FromProtoTime(c.time()), absl::UTCTimeZone()),
      " after --retain-finished ", c.retain_finished(), " (", c.events_removed(),
      " events removed); its summary remains: trainyard get ", job_id));
}

absl::StatusOr<int64_t> SqliteJobStore::DeleteCompactedEvents(const std::string& job_id, int max_rows) {
  {
    absl::MutexLock lock(&seq_mu_);
    if (compacted_.count(job_id) == 0) {
      return absl::FailedPreconditionError(absl::StrCat("job ", job_id, " is not compacted: its events stay"));
    }
  }
  absl::MutexLock lock(&write_mu_);
  // One short transaction per chunk: an append waits for at most one of them.
  TY_ASSIGN_OR_RETURN(auto stmt, writer_->Prepare(
      "DELETE FROM events WHERE job_id = ?1 AND seq IN "
      "(SELECT seq FROM events WHERE job_id = ?1 ORDER BY seq LIMIT ?2)"));
  stmt.BindText(1, job_id);
  stmt.BindInt(2, max_rows);
  TY_RETURN_IF_ERROR(stmt.Run());
  return writer_->Changes();
}

absl::StatusOr<std::vector<std::string>> SqliteJobStore::CompactedWithEvents() {
  absl::MutexLock lock(&read_mu_);
  TY_ASSIGN_OR_RETURN(auto stmt, reader_->Prepare(
      "SELECT id FROM jobs WHERE compacted = 1 AND EXISTS "
      "(SELECT 1 FROM events WHERE events.job_id = jobs.id) ORDER BY num"));
  std::vector<std::string> out;
  while (true) {
    TY_ASSIGN_OR_RETURN(bool row, stmt.Step());
    if (!row) return out;
    out.push_back(stmt.ColumnText(0));
  }
}

absl::StatusOr<SqliteJobStore::Stats> SqliteJobStore::GetStats() {
  absl::MutexLock lock(&read_mu_);
  auto pragma = [&](const char* sql) ABSL_EXCLUSIVE_LOCKS_REQUIRED(read_mu_) -> absl::StatusOr<int64_t> {
    TY_ASSIGN_OR_RETURN(auto stmt, reader_->Prepare(sql));
    TY_ASSIGN_OR_RETURN(bool row, stmt.Step());
    return row ? stmt.ColumnInt(0) : 0;
  };
  Stats stats;
  TY_ASSIGN_OR_RETURN(const int64_t pages, pragma("PRAGMA page_count"));
  TY_ASSIGN_OR_RETURN(stats.page_size, pragma("PRAGMA page_size"));
  TY_ASSIGN_OR_RETURN(stats.free_pages, pragma("PRAGMA freelist_count"));
  TY_ASSIGN_OR_RETURN(const int64_t auto_vacuum, pragma("PRAGMA auto_vacuum"));
  stats.size_bytes = pages * stats.page_size;
  stats.incremental_vacuum = auto_vacuum == 2;
  return stats;
}

absl::StatusOr<int64_t> SqliteJobStore::IncrementalVacuum(int max_pages) {
  TY_ASSIGN_OR_RETURN(const Stats before, GetStats());
  if (!before.incremental_vacuum || before.free_pages == 0) return 0;
  {
    absl::MutexLock lock(&write_mu_);
    TY_ASSIGN_OR_RETURN(auto stmt, writer_->Prepare(absl::StrCat("PRAGMA incremental_vacuum(", max_pages, ")")));
    while (true) {  // one row per page freed
      TY_ASSIGN_OR_RETURN(bool row, stmt.Step());
      if (!row) break;
    }
  }
  TY_ASSIGN_OR_RETURN(const Stats after, GetStats());
  return std::max<int64_t>(0, before.free_pages - after.free_pages);
}

}  // namespace trainyard
