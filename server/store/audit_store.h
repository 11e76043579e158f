// The controller's audit log: one row per mutating call (submit, cancel, checkpoint,
// resubmit, cordon, uncordon, drain, policy reload), accepted or refused, with who made
// it (identity and role), when, its target and its outcome (docs/security.md, "Audit
// log"). SqliteJobStore keeps it in the `audit` table of trainyard.db (schema 4).
//
// An accepted call is written ahead: its row is committed with outcome PENDING before
// the call changes anything, and set to OK (or the refusal's code) once it returned. So
// an acknowledged change always has its row; a controller that stopped in between
// leaves PENDING, which reads as "tried, outcome unknown". Implementations are
// thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "trainyard/v1/job.pb.h"

namespace trainyard {

inline constexpr char kAuditPending[] = "PENDING";
// Longest target, reason and message an audit row keeps (bytes, cut on a UTF-8
// boundary): a caller must not be able to grow the log by sending huge fields.
inline constexpr size_t kMaxAuditFieldBytes = 1024;

struct AuditQuery {
  std::string job_id;      // "": every row; else rows naming it (job_id or job_ids)
  int64_t since_ms = 0;    // rows at or after this time (ms since the epoch)
  int limit = 100;
};

class AuditStore {
 public:
  virtual ~AuditStore() = default;

  // Commits `record` (its id is ignored; its strings must be valid UTF-8) and returns
  // the id it got.
  virtual absl::StatusOr<int64_t> AppendAudit(const v1::AuditRecord& record) = 0;
  // Sets row `id`'s outcome and message and, when not empty, its job_ids.
  virtual absl::Status FinishAudit(int64_t id, const std::string& outcome, const std::string& message,
                                   const std::vector<std::string>& job_ids) = 0;
  // Rows matching `query`, newest first.
  virtual absl::StatusOr<std::vector<v1::AuditRecord>> ReadAudit(const AuditQuery& query) = 0;
  // Deletes rows naming no job (no job_id, no job_ids) older than `before_ms`, and rows
  // whose every named job no longer exists in the store; returns how many went.
  virtual absl::StatusOr<int64_t> PruneAudit(int64_t before_ms) = 0;
};

}  // namespace trainyard
