// SqliteJobStore::ReadRecoveryEvents: what a restarted controller reads of an active
// job's events (JobStateMachine::Recover), without reading the job's whole log.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "server/store/sqlite_job_store.h"
#include "server/store/sqlite_schema.h"

namespace trainyard {

absl::StatusOr<std::vector<v1::Event>> SqliteJobStore::ReadRecoveryEvents(const std::string& job_id, int attempt,
                                                                          int step_tail) {
  TY_RETURN_IF_ERROR(CompactedError(job_id));
  absl::MutexLock lock(&read_mu_);
  std::vector<v1::Event> out;
  auto read = [&](SqliteStatement& stmt) -> absl::Status {
    while (true) {
      TY_ASSIGN_OR_RETURN(bool row, stmt.Step());
      if (!row) return absl::OkStatus();
      v1::Event event;
      if (!event.ParseFromString(stmt.ColumnBlob(0))) {
        return absl::DataLossError(absl::StrCat("job ", job_id, ": corrupt event row"));
      }
      out.push_back(std::move(event));
    }
  };
  // The rare kinds, through the events_recovery partial index (its WHERE repeated
  // word for word, so SQLite uses it): every attempt's, as RestoreBackoff counts the
  // resizes of all of them and RestorePastPlacements reads earlier placements.
  TY_ASSIGN_OR_RETURN(
      auto rare,
      reader_->Prepare("SELECT data FROM events WHERE job_id = ?1 AND kind IN (12, 15, 16, 17) ORDER BY seq"));
  rare.BindText(1, job_id);
  TY_RETURN_IF_ERROR(read(rare));
  // The current attempt's step metrics start after its first event among those (its
  // SCHEDULED job state; screening refuses events of other attempts once it is placed).
  int64_t from = 1;
  for (const v1::Event& e : out) {
    if (e.attempt() == attempt) {
      from = e.seq();
      break;
    }
    from = e.seq() + 1;
  }
  if (step_tail > 0) {
    // Newest first along the primary key, stopping after `step_tail` of them.
    TY_ASSIGN_OR_RETURN(
        auto steps,
        reader_->Prepare("SELECT data FROM events WHERE job_id = ?1 AND seq >= ?2 AND attempt = ?3 AND kind = ?4 "
                         "ORDER BY seq DESC LIMIT ?5"));
    steps.BindText(1, job_id);
    steps.BindInt(2, from);
    steps.BindInt(3, attempt);
    steps.BindInt(4, kKindStepMetrics);
    steps.BindInt(5, step_tail);
    TY_RETURN_IF_ERROR(read(steps));
  }
  std::sort(out.begin(), out.end(), [](const v1::Event& a, const v1::Event& b) { return a.seq() < b.seq(); });
  return out;
}

}  // namespace trainyard
