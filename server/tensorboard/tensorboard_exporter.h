#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/base/clock.h"
#include "common/tensorboard/job_run_writer.h"
#include "server/metrics/tensorboard_metrics.h"
#include "server/store/job_store.h"

namespace trainyard {

struct TensorBoardExporterOptions {
  std::string dir;   // --tensorboard-dir
  std::string host;  // in the event files' names
  // How often the writer thread writes (appends and fsyncs) what was committed since its
  // last round; a job's last events are written at its next round too.
  absl::Duration flush_period = absl::Seconds(2);
  // Jobs waiting at most; a notification past it is dropped and counted.
  int max_queued_jobs = 10000;
  int read_batch = 1000;  // events per store read
};

// Keeps --tensorboard-dir's event files current for every job (common/tensorboard/:
// DIR/JOB/attempt-A/ per attempt), written from the events the controller stored.
//
// Ingestion only queues the job's id (OnCommitted: one lock, one set insert; the queue
// holds each job at most once, so it is bounded by the jobs that have events, and a
// full queue drops the notification rather than wait). One writer thread takes the
// queued jobs every flush_period, reads each job's new events back from the store from
// the seq after the last one its files hold, appends their records and fsyncs them: a
// slow or broken disk delays only that thread. Progress lives next to the files
// (job_run_writer.h), so a restarted controller continues each job where its files
// end, without writing a record twice or leaving one out. A failed write is counted,
// logged once per distinct error, and retried from the last durable state next round.
//
// Thread-safe: OnCommitted from any thread; Start, Flush and Stop from the owner.
class TensorBoardExporter {
 public:
  // The job's spec (for the text record), or NOT_FOUND.
  using SpecLookup = std::function<absl::StatusOr<v1::JobSpec>(const std::string& job_id)>;

  // Checks --tensorboard-dir (created if missing, a writable folder) and builds the
  // metrics; the precise error names the flag.
  static absl::StatusOr<std::unique_ptr<TensorBoardExporter>> Create(TensorBoardExporterOptions options,
                                                                     JobStore* store, SpecLookup lookup,
                                                                     prometheus::Registry& registry, Clock* clock);
  ~TensorBoardExporter();

  // Queues `jobs` (the controller's unfinished jobs) and every job that already has a
  // folder with progress under the directory, then starts the writer thread.
  void Start(const std::vector<std::string>& jobs) ABSL_LOCKS_EXCLUDED(mu_);
  void OnCommitted(const std::string& job_id) ABSL_LOCKS_EXCLUDED(mu_);
  // Blocks until a round started after the call has written every job queued before it.
  void Flush() ABSL_LOCKS_EXCLUDED(mu_);
  // Writes what is queued, then stops the thread. Idempotent.
  void Stop() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  TensorBoardExporter(TensorBoardExporterOptions options, JobStore* store, SpecLookup lookup,
                      prometheus::Registry& registry, Clock* clock)
      : options_(std::move(options)), store_(store), lookup_(std::move(lookup)), metrics_(registry), clock_(clock) {}
  void Run() ABSL_LOCKS_EXCLUDED(mu_);
  // Brings one job's files up to its stored events; on the writer thread only.
  absl::Status WriteJob(const std::string& job_id);

  const TensorBoardExporterOptions options_;
  JobStore* const store_;
  const SpecLookup lookup_;
  TensorBoardMetrics metrics_;
  Clock* const clock_;

  absl::Mutex mu_;
  std::set<std::string> queued_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool hurry_ ABSL_GUARDED_BY(mu_) = false;  // Flush: start a round now
  uint64_t rounds_started_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t rounds_done_ ABSL_GUARDED_BY(mu_) = 0;

  // The writer thread's own.
  std::map<std::string, std::unique_ptr<tensorboard::JobRunWriter>> writers_;
  std::map<std::string, std::string> last_error_;  // by job, to log each error once
  std::thread thread_;
};

}  // namespace trainyard
