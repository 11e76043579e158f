#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "server/controller_metrics.h"
#include "server/event_hub.h"
#include "server/gang_scheduler.h"
#include "server/job_store.h"
#include "server/worker_channel.h"
#include "trainyard/v1/job_service.pb.h"
#include "trainyard/v1/worker_service.pb.h"

namespace trainyard {

struct JobManagerOptions {
  absl::Duration heartbeat_interval = absl::Seconds(2);
  // A worker silent (or disconnected) this long is lost; its gangs are torn down.
  absl::Duration heartbeat_timeout = absl::Seconds(15);
  absl::Duration metrics_grace = absl::Minutes(10);
};

// Owns every job's state machine and the worker registry: validation, gang
// scheduling, assignment, event ingestion and failure handling. The store is the
// source of truth; in-memory state is rebuilt from it by Recover(). Thread-safe; one
// mutex covers jobs and workers. Sends to workers are queued (never blocking) and
// store writes are local, so no RPC ever runs under the lock.
class JobManager {
 public:
  JobManager(JobStore* store, EventHub* hub, ControllerMetrics* metrics, Clock* clock,
             JobManagerOptions options);

  absl::Status Recover();

  // JobService.
  // Normalises `spec` (presets, defaults) and checks it as Submit does, against the
  // slots connected now, without creating anything: the preflight gate runs between
  // Validate and Submit. A failure is counted as a rejected job.
  absl::Status Validate(v1::JobSpec* spec);
  absl::StatusOr<v1::Job> Submit(v1::JobSpec spec, const std::string& owner);
  absl::StatusOr<v1::Job> Get(const std::string& id);
  std::vector<v1::Job> List(const std::vector<v1::Job::State>& states, int limit);
  absl::StatusOr<v1::Job> Cancel(const std::string& id, const std::string& reason);
  std::vector<v1::WorkerInfo> Workers();

  // WorkerService. A connection id names one Connect stream.
  absl::Status RegisterWorker(int64_t conn, const v1::Register& reg,
                              std::shared_ptr<WorkerChannel> channel);
  void Heartbeat(int64_t conn, const v1::Heartbeat& heartbeat);
  // Commits the batch (each job's events in one transaction), then acts on them.
  absl::Status IngestEvents(int64_t conn, const v1::EventBatch& batch);
  void StreamClosed(int64_t conn);

  // Periodic work: lost workers, metric series sweeping.
  void Tick();

 private:
  enum class RankPhase { kAssigned, kRunning, kEnded };
  struct JobRuntime {
    v1::Job job;
    int64_t order = 0;  // FIFO position
    std::vector<RankPhase> ranks;  // current attempt
    int running = 0;
    int exited_ok = 0;
    int live = 0;  // ranks holding a slot
    bool tearing_down = false;  // a failure or cancel was sent for this attempt
  };
  struct WorkerRuntime {
    int64_t conn = 0;
    v1::Register reg;
    std::shared_ptr<WorkerChannel> channel;
    bool connected = false;
    absl::Time last_seen;
    int next_port = 0;
  };

  static bool IsTerminal(v1::Job::State s);
  bool IsActive(const JobRuntime& rt) const;
  int FreeSlotsLocked(const std::string& worker) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int TotalSlotsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status ValidateLocked(const v1::JobSpec& normalised) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status Reject(absl::Status status);
  WorkerRuntime* WorkerByConnLocked(int64_t conn) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status SetStateLocked(JobRuntime& rt, v1::Job::State state, const std::string& reason)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EmitLocked(JobRuntime& rt, v1::Event event) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ScheduleLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void StartAttemptLocked(JobRuntime& rt, const std::vector<std::string>& rank_workers)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int AllocatePortLocked(WorkerRuntime& w) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ApplyRankStateLocked(JobRuntime& rt, const v1::Event& event)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RankEndedLocked(JobRuntime& rt, int rank) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FailAttemptLocked(JobRuntime& rt, const std::string& cause)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SendCancelLocked(JobRuntime& rt, const std::string& reason)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void WorkerLostLocked(const std::string& name, const std::string& why)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void UpdateSlotMetricsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  JobStore* const store_;
  EventHub* const hub_;
  ControllerMetrics* const metrics_;
  Clock* const clock_;
  const JobManagerOptions options_;

  absl::Mutex mu_;
  std::map<std::string, JobRuntime> jobs_ ABSL_GUARDED_BY(mu_);
  int64_t next_order_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, WorkerRuntime> workers_ ABSL_GUARDED_BY(mu_);  // by name
};

}  // namespace trainyard
