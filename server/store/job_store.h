#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "trainyard/v1/event.pb.h"
#include "trainyard/v1/job.pb.h"

namespace trainyard {

// One owner's decayed fair-share usage as last saved (server/policy/sharing_policy.h).
struct StoredUsage {
  double slot_seconds = 0;
  int64_t as_of_unix_ms = 0;
};

// The controller's durable state as JobManager and the WatchJob stream use it: jobs
// and their per-job event logs. SqliteJobStore (SQLite) is the implementation; tests wrap it
// to observe or hold up writes. Every write commits before it returns. Reads may run
// while a write commits and see only committed data. Implementations are thread-safe.
class JobStore {
 public:
  virtual ~JobStore() = default;

  // Gives `job` the next id ("job-<n>") and inserts it together with `events` (when
  // not null: the job's first events, which get seq 1, 2, ... and the job's id), in
  // one transaction: either the job and its events exist afterwards or nothing does.
  virtual absl::Status CreateJob(v1::Job* job, std::vector<v1::Event>* events) = 0;
  // A sweep and its children: gives the sweep the next id ("sweep-<n>"), each job the
  // next job id with its sweep_id set (in order, so job_ids[i] is jobs[i]) and inserts
  // them with each job's first events (events[i], may be empty), in one transaction:
  // the sweep and all its jobs exist afterwards, or nothing does.
  virtual absl::Status CreateSweep(v1::Sweep* sweep, std::vector<v1::Job>* jobs,
                                   std::vector<std::vector<v1::Event>>* events) = 0;
  // Every sweep, in creation order.
  virtual absl::StatusOr<std::vector<v1::Sweep>> LoadSweeps() = 0;
  // The job's newest event with payload `kind` (v1::Event's field number, as
  // v1::Event::kValidation); nullopt when it has none.
  virtual absl::StatusOr<std::optional<v1::Event>> LastEventOfKind(const std::string& job_id, int kind) = 0;
  // Replaces the row of an existing job (NOT_FOUND when there is none).
  virtual absl::Status PutJob(const v1::Job& job) = 0;
  // Every job, in creation order.
  virtual absl::StatusOr<std::vector<v1::Job>> LoadJobs() = 0;

  // Commits `events` for one job in one transaction, giving each the next per-job seq
  // (gapless, from 1). An event whose (attempt, rank, source_seq) was already committed
  // (a worker's resend) is dropped. Returns the events committed, with seq set.
  virtual absl::StatusOr<std::vector<v1::Event>> AppendEvents(const std::string& job_id,
                                                              std::vector<v1::Event> events) = 0;
  // Committed events with seq >= from_seq, in order, at most `limit`.
  virtual absl::StatusOr<std::vector<v1::Event>> ReadEvents(const std::string& job_id, int64_t from_seq, int limit) = 0;
  // What JobStateMachine::Recover needs of an active job's events, in seq order: every
  // rank state, stall, job state and checkpoint event, and the last `step_tail` step
  // metrics of attempt `attempt`. This default reads every event (tests' wrappers).
  virtual absl::StatusOr<std::vector<v1::Event>> ReadRecoveryEvents(const std::string& job_id, int attempt,
                                                                    int step_tail) {
    return ReadEvents(job_id, 1, 1 << 30);
  }
  // The highest committed seq of the job (0 when none).
  virtual int64_t LastSeq(const std::string& job_id) = 0;

  // Fleet settings that outlive a controller restart. Cordoned workers, by name, with
  // the reason given; PutCordon(name, false, ...) removes one.
  virtual absl::Status PutCordon(const std::string& worker, bool cordoned, const std::string& reason) = 0;
  virtual absl::StatusOr<std::map<std::string, std::string>> LoadCordons() = 0;
  // Owners' fair-share usage: SaveUsage replaces every row in one transaction.
  virtual absl::Status SaveUsage(const std::map<std::string, StoredUsage>& usage) = 0;
  virtual absl::StatusOr<std::map<std::string, StoredUsage>> LoadUsage() = 0;
};

}  // namespace trainyard
