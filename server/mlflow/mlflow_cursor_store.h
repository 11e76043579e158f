// Where the MLflow exporter is for each job, in trainyard.db's mlflow_runs table
// (schema v3, server/store/sqlite_schema.cc): the run it created, the last event seq
// MLflow has acknowledged, and the running totals its metrics are computed from. A
// row is keyed by job and target (the tracking URI and experiment), so pointing the
// controller at another MLflow starts fresh runs there.
//
// Its own SQLite connection on the store's file (WAL: the job store's writer and
// readers are not held up beyond SQLite's own write lock for one small row).
// Thread-compatible: the exporter's thread alone uses it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/mlflow/mlflow_payload.h"
#include "server/store/sqlite_db.h"

namespace trainyard::mlflow {

struct MlflowCursor {
  std::string job_id;
  std::string run_id;  // "" until runs/create answered
  int64_t sent_seq = 0;
  bool params_logged = false;
  bool finished = false;  // the run's end status was set: nothing more to send
  Totals totals;
};

class MlflowCursorStore {
 public:
  // Opens DATA_DIR/trainyard.db, which SqliteJobStore::Open has created or migrated.
  static absl::StatusOr<std::unique_ptr<MlflowCursorStore>> Open(const std::string& data_dir,
                                                                 const std::string& target);
  // Every cursor of this target.
  absl::StatusOr<std::vector<MlflowCursor>> LoadAll();
  // Inserts or replaces the job's row; committed when it returns.
  absl::Status Put(const MlflowCursor& cursor);

 private:
  MlflowCursorStore(std::unique_ptr<SqliteDb> db, std::string target) : db_(std::move(db)), target_(std::move(target)) {}
  std::unique_ptr<SqliteDb> db_;
  std::string target_;
};

}  // namespace trainyard::mlflow
