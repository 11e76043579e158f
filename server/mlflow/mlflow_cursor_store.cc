#include "server/mlflow/mlflow_cursor_store.h"

#include <filesystem>
#include <utility>

#include "common/base/status_macros.h"

namespace trainyard::mlflow {

absl::StatusOr<std::unique_ptr<MlflowCursorStore>> MlflowCursorStore::Open(const std::string& data_dir,
                                                                           const std::string& target) {
  const std::string path = (std::filesystem::path(data_dir) / "trainyard.db").string();
  TY_ASSIGN_OR_RETURN(std::unique_ptr<SqliteDb> db, SqliteDb::Open(path));
  return std::unique_ptr<MlflowCursorStore>(new MlflowCursorStore(std::move(db), target));
}

absl::StatusOr<std::vector<MlflowCursor>> MlflowCursorStore::LoadAll() {
  TY_ASSIGN_OR_RETURN(SqliteStatement stmt,
                      db_->Prepare("SELECT job_id, run_id, sent_seq, params_logged, finished, recompiles, stalls, "
                                   "last_step, attempt FROM mlflow_runs WHERE target = ?1"));
  stmt.BindText(1, target_);
  std::vector<MlflowCursor> out;
  while (true) {
    TY_ASSIGN_OR_RETURN(bool row, stmt.Step());
    if (!row) break;
    MlflowCursor c;
    c.job_id = stmt.ColumnText(0);
    c.run_id = stmt.ColumnText(1);
    c.sent_seq = stmt.ColumnInt(2);
    c.params_logged = stmt.ColumnInt(3) != 0;
    c.finished = stmt.ColumnInt(4) != 0;
    c.totals.recompiles = stmt.ColumnInt(5);
    c.totals.stalls = stmt.ColumnInt(6);
    c.totals.last_step = stmt.ColumnInt(7);
    c.totals.attempt = static_cast<int32_t>(stmt.ColumnInt(8));
    out.push_back(std::move(c));
  }
  return out;
}

absl::Status MlflowCursorStore::Put(const MlflowCursor& c) {
  TY_ASSIGN_OR_RETURN(SqliteStatement stmt,
                      db_->Prepare("INSERT OR REPLACE INTO mlflow_runs (job_id, target, run_id, sent_seq, "
                                   "params_logged, finished, recompiles, stalls, last_step, attempt) "
                                   "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)"));
  stmt.BindText(1, c.job_id);
  stmt.BindText(2, target_);
  stmt.BindText(3, c.run_id);
  stmt.BindInt(4, c.sent_seq);
  stmt.BindInt(5, c.params_logged ? 1 : 0);
  stmt.BindInt(6, c.finished ? 1 : 0);
  stmt.BindInt(7, c.totals.recompiles);
  stmt.BindInt(8, c.totals.stalls);
  stmt.BindInt(9, c.totals.last_step);
  stmt.BindInt(10, c.totals.attempt);
  return stmt.Run();
}

}  // namespace trainyard::mlflow
