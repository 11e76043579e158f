// The artifact store's SQLite index: the rows of the `artifacts` table (its schema is
// server/store/artifact_schema.h) and the listing of complete artifacts (List, Find).
// The files and uploads are artifact_store.cc's; see artifact_store.h for the layout,
// the states and the thread contract.
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/proto_time.h"
#include "common/spec/spec_error.h"
#include "server/state/artifact_store.h"
#include "server/store/artifact_schema.h"

namespace trainyard {
namespace {

constexpr char kSelectColumns[] =
    "SELECT job_id, name, kind, attempt, rank, worker, size_bytes, sha256, state, create_time FROM artifacts ";

v1::ArtifactInfo InfoOf(const v1::ArtifactHeader& h, int64_t create_time_us) {
  v1::ArtifactInfo info;
  info.set_job_id(h.job_id());
  info.set_name(h.name());
  info.set_kind(h.kind());
  info.set_attempt(h.attempt());
  info.set_rank(h.rank());
  info.set_worker(h.worker());
  info.set_size_bytes(h.size_bytes());
  info.set_sha256(h.sha256());
  *info.mutable_create_time() = ToProtoTime(absl::FromUnixMicros(create_time_us));
  return info;
}

}  // namespace

// The row a statement over kSelectColumns stands on.
ArtifactStore::Row ArtifactStore::RowAt(SqliteStatement& stmt) {
  Row row;
  row.header.set_job_id(stmt.ColumnText(0));
  row.header.set_name(stmt.ColumnText(1));
  row.header.set_kind(stmt.ColumnText(2));
  row.header.set_attempt(static_cast<int32_t>(stmt.ColumnInt(3)));
  row.header.set_rank(static_cast<int32_t>(stmt.ColumnInt(4)));
  row.header.set_worker(stmt.ColumnText(5));
  row.header.set_size_bytes(stmt.ColumnInt(6));
  row.header.set_sha256(stmt.ColumnText(7));
  row.complete = stmt.ColumnText(8) == "complete";
  row.create_time_us = stmt.ColumnInt(9);
  return row;
}

absl::Status ArtifactStore::InitSchema() {
  absl::MutexLock lock(&mu_);
  return CreateArtifactsTable(*db_);
}

// ---------------------------------------------------------------------------------------
// Rows

absl::StatusOr<std::optional<ArtifactStore::Row>> ArtifactStore::ReadRowLocked(const std::string& job_id,
                                                                               const std::string& name) {
  TY_ASSIGN_OR_RETURN(auto stmt, db_->Prepare(absl::StrCat(kSelectColumns, "WHERE job_id = ?1 AND name = ?2")));
  stmt.BindText(1, job_id);
  stmt.BindText(2, name);
  TY_ASSIGN_OR_RETURN(bool found, stmt.Step());
  if (!found) return std::optional<Row>();
  return std::optional<Row>(RowAt(stmt));
}

absl::StatusOr<std::vector<ArtifactStore::Row>> ArtifactStore::AllRowsLocked() {
  TY_ASSIGN_OR_RETURN(auto stmt, db_->Prepare(absl::StrCat(kSelectColumns, "ORDER BY job_id, name")));
  std::vector<Row> rows;
  while (true) {
    TY_ASSIGN_OR_RETURN(bool more, stmt.Step());
    if (!more) break;
    rows.push_back(RowAt(stmt));
  }
  return rows;
}

absl::Status ArtifactStore::InsertPartialLocked(const v1::ArtifactHeader& h) {
  TY_ASSIGN_OR_RETURN(
      auto stmt,
      db_->Prepare(
          "INSERT INTO artifacts (job_id, name, kind, attempt, rank, worker, size_bytes, sha256, state, create_time) "
          "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, 'partial', ?9)"));
  stmt.BindText(1, h.job_id());
  stmt.BindText(2, h.name());
  stmt.BindText(3, h.kind());
  stmt.BindInt(4, h.attempt());
  stmt.BindInt(5, h.rank());
  stmt.BindText(6, h.worker());
  stmt.BindInt(7, h.size_bytes());
  stmt.BindText(8, h.sha256());
  stmt.BindInt(9, absl::ToUnixMicros(clock_->Now()));
  return stmt.Run();
}

absl::Status ArtifactStore::DeleteRowLocked(const std::string& job_id, const std::string& name) {
  TY_ASSIGN_OR_RETURN(auto stmt, db_->Prepare("DELETE FROM artifacts WHERE job_id = ?1 AND name = ?2"));
  stmt.BindText(1, job_id);
  stmt.BindText(2, name);
  return stmt.Run();
}

absl::StatusOr<int64_t> ArtifactStore::JobBytesLocked(const std::string& job_id) {
  TY_ASSIGN_OR_RETURN(auto stmt, db_->Prepare("SELECT COALESCE(SUM(size_bytes), 0) FROM artifacts WHERE job_id = ?1"));
  stmt.BindText(1, job_id);
  TY_ASSIGN_OR_RETURN(bool row, stmt.Step());
  return row ? stmt.ColumnInt(0) : 0;
}

absl::StatusOr<int64_t> ArtifactStore::JobFilesLocked(const std::string& job_id) {
  TY_ASSIGN_OR_RETURN(auto stmt, db_->Prepare("SELECT COUNT(*) FROM artifacts WHERE job_id = ?1"));
  stmt.BindText(1, job_id);
  TY_ASSIGN_OR_RETURN(bool row, stmt.Step());
  return row ? stmt.ColumnInt(0) : 0;
}

// ---------------------------------------------------------------------------------------
// Reading

absl::StatusOr<std::vector<v1::ArtifactInfo>> ArtifactStore::List(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  TY_ASSIGN_OR_RETURN(
      auto stmt, db_->Prepare(absl::StrCat(kSelectColumns,
                                           "WHERE job_id = ?1 AND state = 'complete' ORDER BY create_time, rowid")));
  stmt.BindText(1, job_id);
  std::vector<v1::ArtifactInfo> out;
  while (true) {
    TY_ASSIGN_OR_RETURN(bool more, stmt.Step());
    if (!more) break;
    const Row row = RowAt(stmt);
    out.push_back(InfoOf(row.header, row.create_time_us));
  }
  return out;
}

absl::StatusOr<v1::ArtifactInfo> ArtifactStore::Find(const std::string& job_id, const std::string& name) {
  absl::MutexLock lock(&mu_);
  TY_ASSIGN_OR_RETURN(std::optional<Row> row, ReadRowLocked(job_id, name));
  if (!row || !row->complete) {
    return absl::NotFoundError(absl::StrCat("job ", Quote(job_id), " has no stored artifact ", Quote(name)));
  }
  return InfoOf(row->header, row->create_time_us);
}

}  // namespace trainyard
