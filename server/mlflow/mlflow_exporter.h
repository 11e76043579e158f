// Sends every tracked job's metrics to MLflow (--mlflow-uri): one run per job, its
// params the resolved spec, tags owner / job id / attempt, metrics from the job's
// stored events, and the run's end status when the job ends.
//
// The outbox is a cursor, not a queue: SQLite already holds every committed event, so
// per job the exporter keeps only the last seq MLflow acknowledged (persisted in
// mlflow_runs with the run id, MlflowCursorStore) and reads what follows back from the
// store when it sends. Memory is bounded by the number of jobs, nothing is dropped
// however long MLflow is away, and a controller restart resumes each run where it
// stopped. OnCommitted (the ingest path) only marks the job dirty under a short lock.
//
// One sender thread: per job it creates (or, after a crash between create and the
// cursor write, finds by its trainyard.job_id tag) the run, logs the params, then sends
// log-batch requests of at most 1000 metrics, advancing the cursor after each
// acknowledged one. A failed request is retried for that job after exponential
// backoff (capped); a resend carries the same keys, steps, timestamps and values, which
// MLflow stores once. Failures are logged at most once per log_interval per kind.
//
// Thread-safe: OnCommitted from any thread; Stop once (the destructor calls it).
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/base/clock.h"
#include "server/mlflow/mlflow_client.h"
#include "server/mlflow/mlflow_cursor_store.h"
#include "server/mlflow/mlflow_metrics.h"
#include "server/store/job_store.h"

namespace trainyard::mlflow {

struct MlflowExporterOptions {
  std::string uri;                      // --mlflow-uri
  std::string experiment = "trainyard";  // --mlflow-experiment
  absl::Duration connect_timeout = absl::Seconds(5);
  absl::Duration request_timeout = absl::Seconds(15);
  absl::Duration backoff_initial = absl::Seconds(1);
  absl::Duration backoff_max = absl::Seconds(60);
  absl::Duration log_interval = absl::Seconds(60);
  int events_per_read = 1000;
};

// Checks --mlflow-uri (http(s), no credentials, printable ASCII, at most 2048 bytes)
// and --mlflow-experiment (1..500 bytes of valid UTF-8 without control characters).
absl::Status ValidateMlflowOptions(const MlflowExporterOptions& options);

class MlflowExporter {
 public:
  using JobLookup = std::function<absl::StatusOr<v1::Job>(const std::string& job_id)>;

  // Checks the options and reads the cursors; sends nothing until Start. Everything
  // passed must outlive it.
  static absl::StatusOr<std::unique_ptr<MlflowExporter>> Create(const MlflowExporterOptions& options, JobStore* store,
                                                                JobLookup lookup,
                                                                std::unique_ptr<MlflowCursorStore> cursors,
                                                                prometheus::Registry& registry, Clock* clock);
  ~MlflowExporter();

  // Starts the sender thread. `jobs`: every job (once the manager has recovered, so
  // `lookup` finds them). Those not ended, and those whose run was left unfinished or
  // behind, are sent from their cursors; jobs that ended before MLflow tracking (or
  // this target) was configured are not exported. Once.
  void Start(const std::vector<v1::Job>& jobs) ABSL_LOCKS_EXCLUDED(mu_);
  // The job has newly committed events (the hub's commit observer, on the ingest
  // path): marks it and returns. Before Start it is only remembered.
  void OnCommitted(const std::string& job_id) ABSL_LOCKS_EXCLUDED(mu_);
  // Ends a request in flight and the thread; what was not acknowledged stays in the
  // store for the next start.
  void Stop() ABSL_LOCKS_EXCLUDED(mu_);
  // Blocks until no job has anything left to send, or `timeout` (of the clock) passed
  // (tests). False on timeout.
  bool WaitIdle(absl::Duration timeout) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Pending {
    bool dirty = false;    // something may be left to send
    int failures = 0;      // consecutive, for the backoff
    absl::Time next_try = absl::InfinitePast();
  };

  MlflowExporter(const MlflowExporterOptions& options, JobStore* store, JobLookup lookup,
                 std::unique_ptr<MlflowCursorStore> cursors, prometheus::Registry& registry, Clock* clock);
  void Run() ABSL_LOCKS_EXCLUDED(mu_);
  // The next dirty job whose backoff is over, waiting for one; "" when stopping.
  std::string NextJob() ABSL_LOCKS_EXCLUDED(mu_);
  // One step of `job_id`: the run, the params, or one batch of events. *more: it has
  // more to send right away. Runs on the sender thread only.
  absl::Status Advance(const std::string& job_id, bool* more);
  absl::Status EnsureRun(MlflowCursor* cursor, const v1::Job& job);
  absl::Status Counted(absl::Status status);
  void Complain(const std::string& job_id, const absl::Status& status);
  void UpdateOutbox() ABSL_LOCKS_EXCLUDED(mu_);

  const MlflowExporterOptions options_;
  JobStore* store_;
  JobLookup lookup_;
  std::unique_ptr<MlflowCursorStore> cursors_store_;
  MlflowMetrics metrics_;
  Clock* clock_;
  std::atomic<bool> cancel_{false};
  MlflowClient client_;

  // The sender thread's own.
  std::map<std::string, MlflowCursor> cursors_;
  std::string experiment_id_;
  absl::Time last_complaint_ = absl::InfinitePast();
  std::string last_complaint_kind_;
  int suppressed_ = 0;
  bool failing_ = false;

  absl::Mutex mu_;
  std::map<std::string, Pending> pending_ ABSL_GUARDED_BY(mu_);
  std::string last_picked_ ABSL_GUARDED_BY(mu_);  // round robin among jobs
  bool wake_ ABSL_GUARDED_BY(mu_) = false;
  bool busy_ ABSL_GUARDED_BY(mu_) = false;  // the thread is sending
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace trainyard::mlflow
