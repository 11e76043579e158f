#pragma once

#include "absl/status/status.h"
#include "server/store/sqlite_db.h"

namespace trainyard {

// The `artifacts` table of the controller's database, the artifact store's index
// (server/state/artifact_store.h): one row per (job_id, name), 'partial' while its
// upload runs and 'complete' once the file is hashed and in place. Created IF NOT
// EXISTS, as the artifact store opens: a database from before artifacts gains it on
// the next start, whatever its schema version (sqlite_schema.h).
absl::Status CreateArtifactsTable(SqliteDb& db);

}  // namespace trainyard
