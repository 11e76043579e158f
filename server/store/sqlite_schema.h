#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/store/sqlite_db.h"

namespace trainyard {

// The schema version this build writes (PRAGMA user_version of trainyard.db).
// 1: the tables before versions were recorded (user_version 0 with a jobs table).
// 2: events.kind and the events_recovery partial index (recovery reads only the events
//    it needs), jobs.compacted (retention).
// 3: mlflow_runs, the MLflow exporter's run id and sent-event cursor per job
//    (server/mlflow/mlflow_cursor_store.h).
// 4: audit, the log of mutating calls (server/store/audit_store.h).
// 5: sweeps, each sweep (job array) as stored with its children.
inline constexpr int kSchemaVersion = 5;

// Event kinds (v1::Event payload field numbers) in the events_recovery index: rank
// states, stalls, job states and checkpoints. Step metrics are read as a tail.
inline constexpr int kKindStepMetrics = 10;

// The store's schema version, read without writing: 0 for an empty file, 1 for an
// unversioned store. FAILED_PRECONDITION for a file SQLite cannot read or a negative
// version.
absl::StatusOr<int> ReadSchemaVersion(SqliteDb& db, const std::string& path);
// FAILED_PRECONDITION naming both versions when `version` is newer than kSchemaVersion.
absl::Status CheckSchemaVersion(int version, const std::string& path);
// Creates or migrates the schema to kSchemaVersion in one transaction (re-checking the
// version under the write lock). *migrated_from: the version migrated from, -1 if none.
absl::Status MigrateSchema(SqliteDb& db, const std::string& path, int* migrated_from);

}  // namespace trainyard
