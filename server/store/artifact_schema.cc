#include "server/store/artifact_schema.h"

namespace trainyard {

absl::Status CreateArtifactsTable(SqliteDb& db) {
  return db.Exec(R"sql(
    CREATE TABLE IF NOT EXISTS artifacts (
      job_id      TEXT NOT NULL,
      name        TEXT NOT NULL,
      kind        TEXT NOT NULL,
      attempt     INTEGER NOT NULL,
      rank        INTEGER NOT NULL,
      worker      TEXT NOT NULL,
      size_bytes  INTEGER NOT NULL,
      sha256      TEXT NOT NULL,
      state       TEXT NOT NULL CHECK (state IN ('partial', 'complete')),
      create_time INTEGER NOT NULL,
      PRIMARY KEY (job_id, name)
    );
  )sql");
}

}  // namespace trainyard
