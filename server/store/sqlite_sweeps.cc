// SqliteJobStore's sweeps: a sweep's row and all its children's rows and first events
// in one transaction, the sweeps read back at recovery, and a job's newest event of a
// kind (a sweep's ranking reads each child's newest Validation).
#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "server/store/sqlite_job_store.h"

namespace trainyard {

absl::Status SqliteJobStore::CreateSweep(v1::Sweep* sweep, std::vector<v1::Job>* jobs,
                                         std::vector<std::vector<v1::Event>>* events) {
  if (events->size() != jobs->size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("CreateSweep: ", jobs->size(), " jobs but ", events->size(), " event lists"));
  }
  absl::MutexLock lock(&write_mu_);
  TY_RETURN_IF_ERROR(writer_->Exec("BEGIN IMMEDIATE"));
  std::vector<std::vector<v1::Event>> inserted(jobs->size());
  std::vector<int64_t> last(jobs->size(), 0);
  auto body = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_) -> absl::Status {
    TY_RETURN_IF_ERROR(writer_->Exec("INSERT INTO sweeps (id) VALUES (NULL)"));
    const int64_t num = sqlite3_last_insert_rowid(writer_->raw());
    sweep->set_id(absl::StrCat("sweep-", num));
    sweep->clear_job_ids();
    for (size_t i = 0; i < jobs->size(); ++i) {
      v1::Job& job = (*jobs)[i];
      job.set_sweep_id(sweep->id());
      TY_ASSIGN_OR_RETURN(inserted[i], InsertJobLocked(&job, &(*events)[i], &last[i]));
      sweep->add_job_ids(job.id());
    }
    TY_ASSIGN_OR_RETURN(auto stmt, writer_->Prepare("UPDATE sweeps SET id = ?1, data = ?2 WHERE num = ?3"));
    stmt.BindText(1, sweep->id());
    stmt.BindBlob(2, sweep->SerializeAsString());
    stmt.BindInt(3, num);
    return stmt.Run();
  };
  absl::Status status = body();
  if (status.ok()) status = writer_->Exec("COMMIT");
  if (!status.ok()) {
    writer_->Exec("ROLLBACK").IgnoreError();
    sweep->clear_id();
    sweep->clear_job_ids();
    for (v1::Job& job : *jobs) {
      job.clear_id();
      job.clear_sweep_id();
    }
    return status;
  }
  for (size_t i = 0; i < jobs->size(); ++i) {
    (*events)[i] = std::move(inserted[i]);
    SetCommittedSeq((*jobs)[i].id(), last[i]);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<v1::Sweep>> SqliteJobStore::LoadSweeps() {
  absl::MutexLock lock(&write_mu_);
  TY_ASSIGN_OR_RETURN(auto stmt, writer_->Prepare("SELECT id, data FROM sweeps WHERE data IS NOT NULL ORDER BY num"));
  std::vector<v1::Sweep> sweeps;
  while (true) {
    TY_ASSIGN_OR_RETURN(bool row, stmt.Step());
    if (!row) break;
    v1::Sweep sweep;
    if (!sweep.ParseFromString(stmt.ColumnBlob(1))) {
      return absl::DataLossError(absl::StrCat("sweep ", stmt.ColumnText(0), ": corrupt row"));
    }
    sweeps.push_back(std::move(sweep));
  }
  return sweeps;
}

absl::StatusOr<std::optional<v1::Event>> SqliteJobStore::LastEventOfKind(const std::string& job_id, int kind) {
  TY_RETURN_IF_ERROR(CompactedError(job_id));
  absl::MutexLock lock(&read_mu_);
  TY_ASSIGN_OR_RETURN(auto stmt, reader_->Prepare("SELECT data FROM events WHERE job_id = ?1 AND kind = ?2 "
                                                  "ORDER BY seq DESC LIMIT 1"));
  stmt.BindText(1, job_id);
  stmt.BindInt(2, kind);
  TY_ASSIGN_OR_RETURN(bool row, stmt.Step());
  if (!row) return std::optional<v1::Event>();
  v1::Event event;
  if (!event.ParseFromString(stmt.ColumnBlob(0))) {
    return absl::DataLossError(absl::StrCat("job ", job_id, ": corrupt event row"));
  }
  return std::optional<v1::Event>(std::move(event));
}

}  // namespace trainyard
