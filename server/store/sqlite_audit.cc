// SqliteJobStore's audit log (server/store/audit_store.h): the `audit` table.
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/status_macros.h"
#include "google/protobuf/util/time_util.h"
#include "server/store/sqlite_job_store.h"

namespace trainyard {
namespace {

// job_ids as stored: " job-1 job-2 ", so one job matches as instr(job_ids, ' ID ').
std::string JoinIds(const std::vector<std::string>& ids) {
  if (ids.empty()) return "";
  return absl::StrCat(" ", absl::StrJoin(ids, " "), " ");
}

constexpr char kColumns[] =
    "id, time_ms, identity, role, action, target, job_id, reason, via, outcome, message, job_ids";

v1::AuditRecord RowToRecord(SqliteStatement& stmt) {
  v1::AuditRecord r;
  r.set_id(stmt.ColumnInt(0));
  *r.mutable_time() = google::protobuf::util::TimeUtil::MillisecondsToTimestamp(stmt.ColumnInt(1));
  r.set_identity(stmt.ColumnText(2));
  r.set_role(stmt.ColumnText(3));
  r.set_action(stmt.ColumnText(4));
  r.set_target(stmt.ColumnText(5));
  r.set_job_id(stmt.ColumnText(6));
  r.set_reason(stmt.ColumnText(7));
  r.set_via(stmt.ColumnText(8));
  r.set_outcome(stmt.ColumnText(9));
  r.set_message(stmt.ColumnText(10));
  const std::string ids = stmt.ColumnText(11);
  size_t start = 0;
  while (start < ids.size()) {
    size_t end = ids.find(' ', start);
    if (end == std::string::npos) end = ids.size();
    if (end > start) r.add_job_ids(ids.substr(start, end - start));
    start = end + 1;
  }
  return r;
}

}  // namespace

absl::StatusOr<int64_t> SqliteJobStore::AppendAudit(const v1::AuditRecord& record) {
  absl::MutexLock lock(&write_mu_);
  TY_ASSIGN_OR_RETURN(auto stmt, writer_->Prepare(
      "INSERT INTO audit (time_ms, identity, role, action, target, job_id, reason, via, outcome, message, job_ids) "
      "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)"));
  stmt.BindInt(1, google::protobuf::util::TimeUtil::TimestampToMilliseconds(record.time()));
  stmt.BindText(2, record.identity());
  stmt.BindText(3, record.role());
  stmt.BindText(4, record.action());
  stmt.BindText(5, record.target());
  stmt.BindText(6, record.job_id());
  stmt.BindText(7, record.reason());
  stmt.BindText(8, record.via());
  stmt.BindText(9, record.outcome());
  stmt.BindText(10, record.message());
  stmt.BindText(11, JoinIds({record.job_ids().begin(), record.job_ids().end()}));
  TY_RETURN_IF_ERROR(stmt.Run());
  return sqlite3_last_insert_rowid(writer_->raw());
}

absl::Status SqliteJobStore::FinishAudit(int64_t id, const std::string& outcome, const std::string& message,
                                         const std::vector<std::string>& job_ids) {
  absl::MutexLock lock(&write_mu_);
  TY_ASSIGN_OR_RETURN(auto stmt, writer_->Prepare(
      "UPDATE audit SET outcome = ?2, message = ?3, job_ids = CASE WHEN ?4 = '' THEN job_ids ELSE ?4 END "
      "WHERE id = ?1"));
  stmt.BindInt(1, id);
  stmt.BindText(2, outcome);
  stmt.BindText(3, message);
  stmt.BindText(4, JoinIds(job_ids));
  TY_RETURN_IF_ERROR(stmt.Run());
  if (writer_->Changes() != 1) return absl::NotFoundError(absl::StrCat("audit row ", id, " not found"));
  return absl::OkStatus();
}

absl::StatusOr<std::vector<v1::AuditRecord>> SqliteJobStore::ReadAudit(const AuditQuery& query) {
  absl::MutexLock lock(&read_mu_);
  const std::string sql = absl::StrCat(
      "SELECT ", kColumns, " FROM audit WHERE time_ms >= ?1",
      query.job_id.empty() ? "" : " AND (job_id = ?2 OR instr(job_ids, ' ' || ?2 || ' ') > 0)",
      " ORDER BY id DESC LIMIT ?3");
  TY_ASSIGN_OR_RETURN(auto stmt, reader_->Prepare(sql));
  stmt.BindInt(1, query.since_ms);
  if (!query.job_id.empty()) stmt.BindText(2, query.job_id);
  stmt.BindInt(3, query.limit);
  std::vector<v1::AuditRecord> out;
  while (true) {
    TY_ASSIGN_OR_RETURN(bool row, stmt.Step());
    if (!row) break;
    out.push_back(RowToRecord(stmt));
  }
  return out;
}

absl::StatusOr<int64_t> SqliteJobStore::PruneAudit(int64_t before_ms) {
  absl::MutexLock lock(&write_mu_);
  // A row naming a job lives as long as the job's row; jobs are never deleted today,
  // so the second clause only matters for a store whose jobs were removed by hand.
  TY_ASSIGN_OR_RETURN(auto stmt, writer_->Prepare(
      "DELETE FROM audit WHERE (job_id = '' AND job_ids = '' AND time_ms < ?1) "
      "OR (job_id != '' AND job_id NOT IN (SELECT id FROM jobs WHERE id IS NOT NULL) AND time_ms < ?1)"));
  stmt.BindInt(1, before_ms);
  TY_RETURN_IF_ERROR(stmt.Run());
  return writer_->Changes();
}

}  // namespace trainyard
