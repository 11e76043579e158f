#pragma once

#include <cstdint>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/base/clock.h"
#include "server/metrics/controller_metrics.h"
#include "server/state/job_manager.h"
#include "server/store/sqlite_job_store.h"

namespace trainyard {

// --retain-finished: how long a finished job keeps its events.
struct RetentionSetting {
  absl::Duration keep = absl::Hours(24 * 30);  // absl::InfiniteDuration(): forever
  std::string text = "30d";                    // as the job's Compaction names it
};
// "30d", "12h", "90m", "3600s" (a positive number, decimals allowed, and a unit), or
// "forever" / "0": events are never compacted. INVALID_ARGUMENT for anything else,
// a negative one, or one over 100 years.
absl::StatusOr<RetentionSetting> ParseRetainFinished(const std::string& text);

struct RetentionOptions {
  RetentionSetting retain;
  absl::Duration interval = absl::Minutes(10);  // between passes
  int delete_chunk = 2000;                      // events per delete transaction
  int vacuum_chunk = 1024;                      // pages per incremental_vacuum step
  // Audit rows naming no job (cordon, uncordon, drain rows that moved nothing, policy
  // reloads, refusals of no job) are kept this long; rows naming a job, as long as it.
  absl::Duration audit_keep = absl::Hours(24 * 365);
};

// Compacts finished jobs' events once they ended `retain.keep` ago, off the hot path:
// its own thread, never under JobManager's state lock. A job is compacted in two
// steps: JobManager::MarkCompacted commits its row with Job.compacted (the atomic
// step: from then on its events read as compacted, FAILED_PRECONDITION), then its
// events are deleted in short transactions of `delete_chunk`, so an append waits for
// at most one of them. A pass cut off between the two (a stop, a crash) is finished by
// the next one, which first deletes what compacted jobs still hold. Then incremental
// vacuum gives free pages back in steps of `vacuum_chunk` (stores created by schema 2
// on; older ones reuse their free pages, see docs/operations.md), and the
// trainyard_store_* series are set.
class RetentionCompactor {
 public:
  RetentionCompactor(JobManager* manager, SqliteJobStore* store, ControllerMetrics* metrics, Clock* clock,
                     RetentionOptions options);
  ~RetentionCompactor();

  struct Pass {
    int jobs = 0;            // newly compacted
    int64_t events = 0;      // deleted (theirs and leftovers of earlier passes)
    int64_t pages = 0;       // vacuumed
    int64_t audit_rows = 0;  // audit rows past audit_keep, deleted
  };
  absl::StatusOr<Pass> RunOnce();
  // A pass now and then every `interval` on a thread of its own, until Stop.
  void Start();
  void Stop();

 private:
  absl::StatusOr<int64_t> DeleteAll(const std::string& id);
  void Loop();
  bool Stopping() ABSL_LOCKS_EXCLUDED(mu_);

  JobManager* const manager_;
  SqliteJobStore* const store_;
  ControllerMetrics* const metrics_;
  Clock* const clock_;
  const RetentionOptions options_;
  absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace trainyard
