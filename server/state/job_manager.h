#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/base/clock.h"
#include "common/spec/sweep.h"
#include "server/metrics/controller_metrics.h"
#include "server/policy/admission_policy.h"
#include "server/state/dependency_gate.h"
#include "server/state/effects.h"
#include "server/state/event_hub.h"
#include "server/state/eviction_manager.h"
#include "server/state/fair_share_manager.h"
#include "server/state/job_state_machine.h"
#include "server/state/scheduling_cycle.h"
#include "server/state/sweep_gate.h"
#include "server/state/worker_channel.h"
#include "server/state/worker_fault_manager.h"
#include "server/state/worker_registry.h"
#include "server/store/job_store.h"
#include "trainyard/v1/job_service.pb.h"
#include "trainyard/v1/worker_service.pb.h"

namespace trainyard {

struct JobManagerOptions {
  absl::Duration heartbeat_interval = absl::Seconds(2);
  // A worker silent (or disconnected) this long is lost; its gangs are torn down. Five
  // heartbeat intervals: long enough for a controller restart (workers reconnect within
  // ~3 s of it being back), short enough to fail a gang fast (Ray: >= 20 s).
  absl::Duration heartbeat_timeout = absl::Seconds(10);
  // A worker silent past the heartbeat timeout is UNREACHABLE, not lost: its running
  // attempts wait this much longer for it to heartbeat or register again (and are then
  // re-adopted, no restart) before it is lost and they fail (--reconnect-window;
  // Determined's agent reconnect window). Zero: lost at the heartbeat timeout.
  absl::Duration reconnect_window = absl::Seconds(25);
  absl::Duration metrics_grace = absl::Minutes(10);
  // Step, compile and log events a second one job may store per rank (EventRateLimiter;
  // the excess is dropped and counted, the stream stays up). <= 0: no cap.
  double max_events_per_s_per_rank = 0;
  // Called (outside both locks) when a store write that follows a state change fails:
  // memory is then ahead of the store. The controller (main.cc) stops the process, so
  // a supervisor restarts it and Recover rebuilds the state from the store; tests
  // record the call. Unset: only logged.
  std::function<void(const absl::Status&)> on_lost_write;
  // Preemption grace and guard (EvictionManager).
  SharingOptions sharing;
  // How often Tick stores the owners' fair-share usage (a crash loses at most this
  // much of it).
  absl::Duration usage_save_interval = absl::Seconds(30);
};

// The answer to a CheckpointJob: the checkpoint, or why there is none.
using CheckpointDone = std::function<void(absl::StatusOr<v1::CheckpointRef>)>;

// The controller's job and worker service, behind JobService and WorkerService:
// admission (AdmissionPolicy), the worker registry (WorkerRegistry), and the managers
// that own the jobs' state: the job state machine (JobStateMachine), the scheduling
// cycle and its queue gates (SchedulingCycle), fair share and quotas
// (FairShareManager), evictions (EvictionManager) and worker faults
// (WorkerFaultManager); the store is the source of truth after a restart.
//
// Thread-safe. Two mutexes, always taken in this order:
//   commit_mu_  taken by writers only for their whole call: writers run one at a
//               time. The writers: Recover, Submit, Cancel, Resize, RegisterWorker,
//               Heartbeat (a GPU out of service), IngestEvents, Tick,
//               RequestCheckpoint, Cordon, Drain, SubmitSweep, CancelSweep,
//               AppendControllerEvent and
//               MarkCompacted. All but the last two go through Write.
//   mu_         the state lock over registry_, the managers and views_. Held only
//               for in-memory work; never across a store call or a send.
// Readers (Get, List, Workers) and the in-memory-only calls (Heartbeat, StreamClosed)
// take only mu_, so they never wait for an fsync; a heartbeat that takes a GPU out of
// service then becomes a writer (commit_mu_, then mu_) to fail the attempts on it.
//
// Ordering and durability. A writer changes state under mu_, recording what must
// happen outside in an Effects value: store writes, then worker messages, then
// watcher wake-ups. It releases mu_ and carries them out in that order while still
// holding commit_mu_ (Run). Because writers are serialised by commit_mu_ from their
// first state change to their last effect, effects reach the store and the workers in
// the order the state changed. In particular:
//   - Per-job seqs are assigned by the store inside the commit (gapless from 1, worker
//     resends dropped by (job, attempt, rank, source_seq)), in that same order.
//   - IngestEvents commits the batch first (under commit_mu_ only), then applies the
//     committed events under mu_; it returns, and the worker is acknowledged, only
//     after the commit. A failed commit fails the call, so the batch is not acked.
//   - Submit commits the job row and its PENDING event in one transaction before the
//     job enters memory; a failed commit fails Submit and leaves no job.
//   - An Assign (or Cancel) is sent only after the writes recorded before it, such as
//     the SCHEDULED row and event that name the placement, were committed.
//   - Watchers read the store and are woken only after the commit; a job is marked
//     settled only after its final events were committed.
//   - Readers see committed state: Get/List answer from views_, each job's row and
//     last seq as last committed, updated by Run after each successful write.
// A write that fails after the state changed (a follow-up transition; Submit's and
// IngestEvents' own commits fail their call instead) stops the rest of that Run: no
// later write, no worker message and no settle of that batch happens, so nothing
// outside ever acts on state the store does not hold. The error goes to the caller
// that waits (Cancel) and to options.on_lost_write, which in the controller stops the
// process for a restart from the store (fail-stop, as etcd does on a failed WAL write).
class JobManager {
 public:
  JobManager(JobStore* store, EventHub* hub, ControllerMetrics* metrics, Clock* clock, JobManagerOptions options);

  absl::Status Recover();

  // JobService.
  // Normalises `spec` and checks it as Submit does (AdmissionPolicy, against the slots
  // connected now) without creating anything: the preflight gate runs between
  // Validate and Submit. A failure is counted as a rejected job.
  // `may_see(owner)`: whether the submitter may name a job of that owner in job.after
  // (DependencyGate::CheckNew; null: any owner's).
  using OwnerFilter = std::function<bool(const std::string& owner)>;
  absl::Status Validate(v1::JobSpec* spec, const OwnerFilter& may_see = nullptr);
  absl::StatusOr<v1::Job> Submit(v1::JobSpec spec, const std::string& owner, const OwnerFilter& may_see = nullptr);
  absl::StatusOr<v1::Job> Get(const std::string& id);
  // Newest first, at most `limit` (0: 100); only jobs of `owner` unless it is empty.
  // `without_sweep_children`: leave out jobs of sweeps (ListSweeps shows those).
  std::vector<v1::Job> List(const std::vector<v1::Job::State>& states, int limit, const std::string& owner = "",
                            bool without_sweep_children = false);
  absl::StatusOr<v1::Job> Cancel(const std::string& id, const std::string& reason);
  // Restarts a job at data-parallel degree `dp` from its last checkpoint
  // (JobStateMachine::Resize); returns the job as committed after the request.
  absl::StatusOr<v1::Job> Resize(const std::string& id, int dp);
  std::vector<v1::WorkerInfo> Workers();

  // Sweeps (job_manager_sweeps.cc; docs/sweeps.md). SubmitSweep expands the request
  // into its points (spec::ExpandSweep: at most `max_points`), normalises and admits
  // each as Submit does, then stores the sweep and every child with its PENDING event
  // in one transaction: all of them exist afterwards, or nothing. INVALID_ARGUMENT
  // naming the point and the key for a point that fails; the admission's error else.
  // `check_child` (may be null) sees each child's normalised spec before anything is
  // stored, for the caller's rules (the submitter's rights); its error refuses the sweep,
  // naming the point. Every child's job.after is checked as Submit checks one job's.
  using ChildCheck = std::function<absl::Status(const v1::JobSpec& child)>;
  absl::StatusOr<v1::SweepView> SubmitSweep(const v1::SubmitSweepRequest& request, const std::string& owner,
                                            const OwnerFilter& may_see = nullptr,
                                            std::size_t max_points = spec::kDefaultMaxSweepPoints,
                                            const ChildCheck& check_child = nullptr);
  // The owner of sweep `id`; nullopt when there is none. Read under the state lock only,
  // so a caller can refuse an unseen sweep before GetSweep reads the store.
  std::optional<std::string> SweepOwner(const std::string& id);
  // The sweep with its children, ranked by their newest validation loss (read from the
  // store). NOT_FOUND for an unknown id.
  absl::StatusOr<v1::SweepView> GetSweep(const std::string& id);
  // Newest first, at most `limit` (0: 100), children left out; only `owner`'s unless empty.
  std::vector<v1::SweepView> ListSweeps(int limit, const std::string& owner = "");
  // Cancels every child that has not ended, in one write (so no child is placed
  // between two cancels), and returns the sweep after it.
  absl::StatusOr<v1::SweepView> CancelSweep(const std::string& id, const std::string& reason);

  // Sharing the fleet (job_manager_sharing.cc).
  // CheckpointJob: asks the running attempt to checkpoint (EvictionManager's errors come
  // back at once) and calls `done` once a requested checkpoint of it is committed;
  // DEADLINE_EXCEEDED after `timeout`, ABORTED when the attempt ends first, CANCELLED
  // once `*gone` (the caller went away; may be null) is set. `done` is called exactly
  // once, outside every lock, on the thread that commits the checkpoint (or Tick's).
  void RequestCheckpoint(const std::string& job_id, absl::Duration timeout, CheckpointDone done,
                         std::shared_ptr<std::atomic<bool>> gone = nullptr);
  // Answers every waiting CheckpointJob with UNAVAILABLE, and every later one at once
  // (the controller is stopping: its gRPC server waits for every call to finish).
  void AbortCheckpointWaiters();
  // CordonWorker: stored first, then in force (WorkerRegistry::Cordon); NOT_FOUND for
  // an unknown worker.
  absl::StatusOr<v1::WorkerInfo> Cordon(const std::string& name, bool cordon, const std::string& reason);
  // DrainWorker: cordons, then evicts every job with a rank there (EvictionManager::Drain).
  absl::StatusOr<v1::DrainWorkerResponse> Drain(const std::string& name, const std::string& reason);
  // The --policy-file's quotas and weights, in force from the next scheduling pass.
  void SetPolicy(SharingPolicy policy);
  // The PENDING jobs the last scheduling pass queued, in its order.
  std::vector<std::string> QueueOrder();

  // WorkerService. A connection id names one Connect stream.
  absl::Status RegisterWorker(int64_t conn, const v1::Register& reg, std::shared_ptr<WorkerChannel> channel);
  // Touches the worker and takes its GPU samples (WorkerRegistry::Heartbeat); a GPU
  // newly out of service fails the attempt with a rank on it (WorkerFaultManager::GpusUnhealthy).
  void Heartbeat(int64_t conn, const v1::Heartbeat& heartbeat);
  // Commits the batch (each job's events in one transaction), then acts on them
  // (job_manager_events.cc, with AppendControllerEvent).
  absl::Status IngestEvents(int64_t conn, const v1::EventBatch& batch);
  void StreamClosed(int64_t conn);

  // Periodic work: lost workers, metric series sweeping.
  void Tick();

  // Artifacts (server/artifact_store). Whether a worker of that name is registered and
  // connected now.
  bool WorkerConnected(const std::string& name);
  // JobStateMachine::AttemptWorkers, under the state lock.
  std::optional<std::vector<std::string>> AttemptWorkers(const std::string& job_id, int attempt);
  // Commits `event`, a controller event (an ArtifactRef, a LogLine), to job `job_id` as
  // a writer does, then wakes its watchers. Returns false, writing nothing, when the
  // job has reached a terminal state: nothing follows its terminal JobStateChange.
  // NOT_FOUND for an unknown job; the store's error when the commit fails.
  absl::StatusOr<bool> AppendControllerEvent(const std::string& job_id, v1::Event event);

  // Event compaction (job_manager_compaction.cc, server/state/event_compaction.h).
  // Finished, settled (JobStateMachine::Closed), not yet compacted jobs that ended before `cutoff`, oldest
  // first. MarkCompacted commits the job's row with Job.compacted (`compaction`, its
  // counts filled in here) and keeps it in memory: from then on the job's events read
  // as compacted and the caller deletes them. FAILED_PRECONDITION for a job that is
  // not one to compact; the store's error, with nothing changed, when the write fails.
  std::vector<std::string> CompactionCandidates(absl::Time cutoff);
  absl::StatusOr<v1::Job> MarkCompacted(const std::string& id, v1::Compaction compaction);

 private:
  // A job as last committed: what readers see.
  struct JobView {
    v1::Job job;
    int64_t order = 0;  // FIFO position
    int64_t last_seq = 0;
  };

  absl::Status Reject(absl::Status status);
  // Sweep `id` (which must exist) from its children's committed rows; children (and
  // their last steps) only when `with_children`. No validations: GetSweep adds those.
  v1::SweepView SweepViewLocked(const std::string& id, bool with_children) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  FleetView FleetLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  v1::Job ViewLocked(const std::string& id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void UpdateSlotMetricsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Tick's worker part (job_manager_workers.cc): unreachable, reconnected and lost
  // workers, and the ranks of ending attempts on unreachable workers.
  void TickWorkersLocked(Effects* fx) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The worker's trainyard_worker_gpu_* gauges from the registry.
  void UpdateGpuMetricsLocked(const std::string& worker) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // CheckpointJob callers waiting for a requested checkpoint.
  struct CheckpointWaiter {
    std::string job_id;
    CheckpointWant want;
    absl::Time deadline;
    CheckpointDone done;
    std::shared_ptr<std::atomic<bool>> gone;
  };
  // Takes out the waiters that `committed` (one job's new events) answers, or that
  // timed out or can no longer be answered (job_id "": every job), with their answers.
  using Answer = std::pair<CheckpointDone, absl::StatusOr<v1::CheckpointRef>>;
  std::vector<Answer> TakeAnsweredLocked(const std::string& job_id, const std::vector<v1::Event>& committed)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The answer `committed` (events of `job_id`, "" for none) or the time gives waiter
  // `w`, or nullopt while it must wait on.
  std::optional<absl::StatusOr<v1::CheckpointRef>> AnswerOfLocked(const CheckpointWaiter& w, const std::string& job_id,
                                                                  const std::vector<v1::Event>& committed,
                                                                  absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static void Deliver(std::vector<Answer> answers);
  // IngestEvents under the commit lock; the CheckpointJob answers it produced go to
  // `answers`, delivered by the caller once the lock is released.
  absl::Status IngestEventsLocked(int64_t conn, const v1::EventBatch& batch, std::vector<Answer>* answers)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(commit_mu_);

  // The writer's ritual, under the commit lock: takes the state lock, runs `op`, then a
  // scheduling pass and the slot gauges, releases the state lock and carries out what
  // was recorded (Run). `fx` may already hold what the caller did (IngestEvents'
  // wake-ups). An error of `op` returns at once, with nothing carried out; else Run's.
  // `op` runs under mu_: give the lambda ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_).
  absl::Status Write(absl::FunctionRef<absl::Status(Effects* fx)> op, Effects fx = Effects())
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(commit_mu_) ABSL_LOCKS_EXCLUDED(mu_);
  // Carries out `fx` in order (see above); returns the first store error.
  absl::Status Run(Effects fx) ABSL_EXCLUSIVE_LOCKS_REQUIRED(commit_mu_) ABSL_LOCKS_EXCLUDED(mu_);

  JobStore* const store_;
  EventHub* const hub_;
  ControllerMetrics* const metrics_;
  Clock* const clock_;
  const JobManagerOptions options_;

  absl::Mutex commit_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  absl::Mutex mu_;
  WorkerRegistry registry_ ABSL_GUARDED_BY(mu_);
  // The managers, each over the job table of jobs_ and the registry; wired in the
  // constructor (which also registers the queue gates).
  JobStateMachine jobs_ ABSL_GUARDED_BY(mu_);
  FairShareManager fair_share_ ABSL_GUARDED_BY(mu_);
  EvictionManager evictions_ ABSL_GUARDED_BY(mu_);
  WorkerFaultManager faults_ ABSL_GUARDED_BY(mu_);
  SchedulingCycle cycle_ ABSL_GUARDED_BY(mu_);
  DependencyGate* dependencies_ ABSL_GUARDED_BY(mu_) = nullptr;  // a gate of cycle_
  SweepGate* sweeps_ ABSL_GUARDED_BY(mu_) = nullptr;             // a gate of cycle_; owns the sweeps
  std::map<std::string, JobView> views_ ABSL_GUARDED_BY(mu_);
  std::vector<CheckpointWaiter> checkpoint_waiters_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;  // AbortCheckpointWaiters was called
  absl::Time usage_saved_ ABSL_GUARDED_BY(commit_mu_) = absl::InfinitePast();
};

}  // namespace trainyard
