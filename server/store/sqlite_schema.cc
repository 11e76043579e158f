// Schema versions of trainyard.db and the forward migrations between them.
//
// The version is SQLite's PRAGMA user_version. A store written before versions were
// recorded has user_version 0 and a `jobs` table: that is version 1. Open reads the
// version without writing anything, refuses a newer one, and migrates an older one
// forward in one transaction (either the whole migration commits or the file is as
// it was).
#include "server/store/sqlite_schema.h"

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "trainyard/v1/event.pb.h"

namespace trainyard {
namespace {

// Version 1: the tables as they were before versions were recorded. IF NOT EXISTS: a
// store of an earlier, unversioned release may lack the later tables.
constexpr char kSchemaV1[] = R"sql(
    CREATE TABLE IF NOT EXISTS jobs (
      num   INTEGER PRIMARY KEY AUTOINCREMENT,
      id    TEXT UNIQUE,
      state INTEGER NOT NULL DEFAULT 0,
      data  BLOB
    );
    CREATE TABLE IF NOT EXISTS events (
      job_id     TEXT NOT NULL,
      seq        INTEGER NOT NULL,
      attempt    INTEGER NOT NULL,
      rank       INTEGER NOT NULL,
      source_seq INTEGER,
      data       BLOB NOT NULL,
      PRIMARY KEY (job_id, seq)
    );
    CREATE UNIQUE INDEX IF NOT EXISTS events_source
      ON events (job_id, attempt, rank, source_seq);
    CREATE TABLE IF NOT EXISTS worker_cordons (
      name   TEXT PRIMARY KEY,
      reason TEXT NOT NULL
    );
    CREATE TABLE IF NOT EXISTS owner_usage (
      owner        TEXT PRIMARY KEY,
      slot_seconds REAL NOT NULL,
      as_of_ms     INTEGER NOT NULL
    );
)sql";

// Version 2: events.kind (the payload's field number in v1::Event, 0 for none); a
// partial index over the kinds recovery reads (ReadRecoveryEvents); jobs.compacted (1
// once retention removed the job's events). The kinds are backfilled from the stored
// events of jobs that have not ended (SUCCEEDED 4, FAILED 5, CANCELLED 6) only: only
// theirs are ever read by kind, and a finished job never runs again. Rewriting every
// row of a large store would cost about a minute per 10 million events; the finished
// jobs' events keep kind 0 ("migrated, not classified").
constexpr char kMigrateToV2[] = R"sql(
    ALTER TABLE events ADD COLUMN kind INTEGER NOT NULL DEFAULT 0;
    UPDATE events SET kind = ty_event_kind(data)
      WHERE job_id IN (SELECT id FROM jobs WHERE state NOT IN (4, 5, 6));
    CREATE INDEX events_recovery ON events (job_id, seq) WHERE kind IN (12, 15, 16, 17);
    ALTER TABLE jobs ADD COLUMN compacted INTEGER NOT NULL DEFAULT 0;
)sql";

// Version 4: the audit log (server/store/audit_store.h). Empty strings rather than NULL
// for "none", so the retention query and the reader need no NULL cases.
constexpr char kMigrateToV4[] = R"sql(
    CREATE TABLE audit (
      id       INTEGER PRIMARY KEY AUTOINCREMENT,
      time_ms  INTEGER NOT NULL,
      identity TEXT NOT NULL,
      role     TEXT NOT NULL,
      action   TEXT NOT NULL,
      target   TEXT NOT NULL,
      job_id   TEXT NOT NULL,
      reason   TEXT NOT NULL,
      via      TEXT NOT NULL,
      outcome  TEXT NOT NULL,
      message  TEXT NOT NULL,
      job_ids  TEXT NOT NULL
    );
    CREATE INDEX audit_job ON audit (job_id) WHERE job_id != '';
    CREATE INDEX audit_time ON audit (time_ms);
)sql";

// Version 5: sweeps (job arrays), each stored once with its children; `num` gives the
// ids ("sweep-<num>") and the creation order.
constexpr char kMigrateToV5[] = R"sql(
    CREATE TABLE sweeps (
      num  INTEGER PRIMARY KEY AUTOINCREMENT,
      id   TEXT UNIQUE,
      data BLOB
    );
)sql";

// Version 3: where the MLflow exporter is for each job, per tracking target (the URI
// and experiment), so a restart resumes the same run from the next unsent event.
constexpr char kMigrateToV3[] = R"sql(
    CREATE TABLE mlflow_runs (
      job_id TEXT NOT NULL,
      target TEXT NOT NULL,
      run_id TEXT NOT NULL DEFAULT '',
      sent_seq INTEGER NOT NULL DEFAULT 0,
      params_logged INTEGER NOT NULL DEFAULT 0,
      finished INTEGER NOT NULL DEFAULT 0,
      recompiles INTEGER NOT NULL DEFAULT 0,
      stalls INTEGER NOT NULL DEFAULT 0,
      last_step INTEGER NOT NULL DEFAULT 0,
      attempt INTEGER NOT NULL DEFAULT 0,
      PRIMARY KEY (job_id, target)
    );
)sql";

// ty_event_kind(blob): the payload case of a serialized v1::Event (0 when unparsable).
void EventKindFunction(sqlite3_context* ctx, int, sqlite3_value** argv) {
  const void* blob = sqlite3_value_blob(argv[0]);
  const int size = sqlite3_value_bytes(argv[0]);
  v1::Event event;
  if (blob == nullptr || !event.ParseFromArray(blob, size)) {
    sqlite3_result_int(ctx, 0);
    return;
  }
  sqlite3_result_int(ctx, static_cast<int>(event.payload_case()));
}

absl::StatusOr<int64_t> QueryInt(SqliteDb& db, const char* sql) {
  TY_ASSIGN_OR_RETURN(auto stmt, db.Prepare(sql));
  TY_ASSIGN_OR_RETURN(bool row, stmt.Step());
  return row ? stmt.ColumnInt(0) : 0;
}

}  // namespace

absl::StatusOr<int> ReadSchemaVersion(SqliteDb& db, const std::string& path) {
  auto version = QueryInt(db, "PRAGMA user_version");
  if (!version.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        path, " is not a readable trainyard store (", version.status().message(), "); it was left as it is"));
  }
  if (*version < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, " has schema version ", *version, ", which no trainyard-controller writes: "
                     "the file is damaged or not a trainyard store; it was left as it is"));
  }
  if (*version > 0) return static_cast<int>(*version);
  TY_ASSIGN_OR_RETURN(int64_t tables,
                      QueryInt(db, "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = 'jobs'"));
  return tables > 0 ? 1 : 0;
}

absl::Status CheckSchemaVersion(int version, const std::string& path) {
  if (version <= kSchemaVersion) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      path, " has schema version ", version, ", newer than this trainyard-controller's ", kSchemaVersion,
      ": it was written by a newer release. Run that release (or a newer one) on it, or restore a backup "
      "taken before the upgrade; the store was not read and nothing in it was changed"));
}

absl::Status MigrateSchema(SqliteDb& db, const std::string& path, int* migrated_from) {
  *migrated_from = -1;
  if (sqlite3_create_function_v2(db.raw(), "ty_event_kind", 1, SQLITE_UTF8 | SQLITE_DETERMINISTIC, nullptr,
                                 &EventKindFunction, nullptr, nullptr, nullptr) != SQLITE_OK) {
    return absl::InternalError(absl::StrCat("sqlite: register ty_event_kind: ", sqlite3_errmsg(db.raw())));
  }
  TY_RETURN_IF_ERROR(db.Exec("BEGIN IMMEDIATE"));
  auto body = [&]() -> absl::Status {
    // Again under the write lock: another process may have migrated meanwhile.
    TY_ASSIGN_OR_RETURN(int version, ReadSchemaVersion(db, path));
    TY_RETURN_IF_ERROR(CheckSchemaVersion(version, path));
    if (version == kSchemaVersion) return absl::OkStatus();
    *migrated_from = version;
    if (version < 2) {
      TY_RETURN_IF_ERROR(db.Exec(kSchemaV1));
      TY_RETURN_IF_ERROR(db.Exec(kMigrateToV2));
    }
    if (version < 3) TY_RETURN_IF_ERROR(db.Exec(kMigrateToV3));
    if (version < 4) TY_RETURN_IF_ERROR(db.Exec(kMigrateToV4));
    if (version < 5) TY_RETURN_IF_ERROR(db.Exec(kMigrateToV5));
    return db.Exec(absl::StrCat("PRAGMA user_version = ", kSchemaVersion));
  };
  absl::Status status = body();
  if (status.ok()) status = db.Exec("COMMIT");
  if (!status.ok()) {
    db.Exec("ROLLBACK").IgnoreError();
    *migrated_from = -1;
  }
  return status;
}

}  // namespace trainyard
