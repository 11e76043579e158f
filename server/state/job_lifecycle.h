#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/base/clock.h"
#include "server/metrics/controller_metrics.h"
#include "server/state/effects.h"
#include "server/state/event_rate_limit.h"
#include "server/policy/event_fencing.h"
#include "server/policy/sharing_policy.h"
#include "server/store/job_store.h"
#include "server/state/tracked_job.h"
#include "server/state/worker_channel.h"
#include "server/state/worker_registry.h"
#include "trainyard/v1/event.pb.h"
#include "trainyard/v1/job.pb.h"
#include "trainyard/v1/worker_service.pb.h"

namespace trainyard {

// How the controller shares its fleet (controller flags; docs/sharing.md).
struct SharingOptions {
  // A victim of a preemption (or a drain) with checkpoint.dir gets this long to save a
  // checkpoint on request before it is stopped anyway (--preemption-grace).
  absl::Duration preemption_grace = absl::Seconds(120);
  // A job preempted more than this many times in the last hour is not preempted again
  // until the oldest of those is an hour old (--max-preemptions-per-job).
  int max_preemptions_per_hour = 3;
};

// What a requested checkpoint must be to answer a CheckpointJob: one of `attempt`, at
// or after `min_step` (the step after the last one the controller had heard of).
struct CheckpointWant {
  int attempt = 0;
  int64_t min_step = 0;
};

// The job state machine: PENDING → SCHEDULED → RUNNING → SUCCEEDED | FAILED |
// CANCELLED, with RESTARTING after a failure while the restart policy allows. It keeps
// each job's working state (rank phases of the current attempt, slot and port holds in
// the worker registry), places pending gangs in queue order, turns committed events
// and worker changes into transitions, and rebuilds itself from stored jobs and events
// after a controller restart.
//
// Restarts (RestartPolicy): each failed attempt's cause is appended to
// Job.failure_causes; restart k waits restart.backoff_s·2^(k-1) from the failure
// before it may be placed; a worker where the job failed twice is avoided when a
// placement without it exists; after restart.elastic_wait_s without slots for its dp
// a job with restart.min_dp > 0 restarts smaller (ElasticPolicy). A CheckpointSaved of
// the current attempt becomes Job.last_checkpoint, which the next attempt resumes from.
// A requested resize (ResizePolicy) ends the running attempt like a restart, without
// backoff and without using a restart, and places the next attempt at exactly its dp.
// So does a worker's refusal of an Assign (kRankExitRefused), which is the controller's
// slot count being wrong, not a failure of the rank or the worker.
//
// It does no I/O: every transition is recorded in the caller's Effects (the job row,
// then a job_state event), and so is every Assign and Cancel for a worker, after the
// writes that name it. Metrics and logs are written directly.
//
// Not thread-safe; owned by JobManager, which uses it (and the registry it shares)
// only under its state mutex.
// A controller-written log line (rank -1) of `attempt`, for a job's event stream.
v1::Event ControllerLog(const std::string& level, const std::string& message, int attempt, absl::Time now);

class JobLifecycle {
 public:
  // max_events_per_s_per_rank: EventRateLimiter's rate for each rank of a job (<= 0:
  // no limit), with ten seconds' worth of burst.
  JobLifecycle(WorkerRegistry* workers, ControllerMetrics* metrics, Clock* clock,
               double max_events_per_s_per_rank = 0);

  // A new job of `owner` for an admitted (normalised) spec, PENDING, created `now`, and
  // its first event (*first: the PENDING job_state), for the caller to commit together.
  static v1::Job NewJob(v1::JobSpec normalised, const std::string& owner, absl::Time now,
                        v1::Event* first);

  // Adopts a job read back from the store at start-up and returns its FIFO position.
  // For a job that was SCHEDULED, RUNNING or RESTARTING, `events` are its stored events:
  // the current attempt's RankState events are replayed, so transitions the crash cut
  // off (every rank exited, a rank failed) happen now, and the placement's workers are
  // expected to reconnect within the heartbeat timeout.
  // `events` need not be the whole log (JobStore::ReadRecoveryEvents): every rank state,
  // stall, job state and checkpoint event, and the current attempt's last
  // RecoveryStepTail(job) step metrics (NoteStep keeps the highest step and the newest
  // step time; a rank's steps only grow, and a tail of 4 per rank holds each one's last).
  int64_t Recover(v1::Job job, const std::vector<v1::Event>& events, Effects* fx);
  static int RecoveryStepTail(const v1::Job& job) { return std::max(256, 4 * job.world_size()); }
  // Retention marked the job compacted (JobManager::MarkCompacted; defined in
  // job_manager_retention.cc): its row keeps the marker in every later write.
  void MarkCompacted(const std::string& id, const v1::Compaction& compaction);
  // Adopts a job whose PENDING row was just committed; returns its FIFO position.
  int64_t Add(v1::Job job);
  bool Contains(const std::string& id) const;
  // Ended (a terminal state) with every rank of its last attempt ended: its event
  // stream is closed, and events that still arrive for it are dropped, not appended.
  bool Closed(const std::string& id) const;

  // NOT_FOUND for an unknown job, FAILED_PRECONDITION for one that already ended.
  absl::Status Cancel(const std::string& id, const std::string& reason, Effects* fx);
  // Restarts the job at data-parallel degree `dp` from its last checkpoint
  // (ResizePolicy::Plan says when it may): a running attempt is cancelled and the job
  // goes RESTARTING; a restarting or PENDING one only changes the dp its restart
  // places. NOT_FOUND for an unknown job; OK without a change when already at `dp`.
  absl::Status Resize(const std::string& id, int dp, Effects* fx);
  // The worker of each rank (index = rank; "" where unknown) of attempt `attempt` of
  // job `id`: the current attempt's placement, or an earlier one's as recorded (see
  // TrackedJob::past_placements); nullopt when this controller does not know it (an
  // unknown job, a future attempt, one placed before a restart of a job that had
  // already ended, or older than the last kMaxPastPlacements).
  std::optional<std::vector<std::string>> AttemptWorkers(const std::string& id, int attempt) const;
  // Before a commit: removes from `events` (one job's, sent by worker `worker`) those
  // that must not be stored (event_fencing: another attempt, a rank not placed on that
  // worker, a checkpoint that cannot be the newest, and step metrics, compile events
  // and log lines past the job's rate: EventRateLimiter) and returns why each was
  // refused. Unknown jobs are the caller's.
  std::vector<EventRefusal> Screen(const std::string& worker, const std::string& job_id,
                                   std::vector<v1::Event>* events);
  // Acts on a job's newly committed events of the current attempt: RankState, a Stall
  // (a failure), a CheckpointSaved (the job's last_checkpoint).
  void ApplyEvents(const std::string& job_id, const std::vector<v1::Event>& committed,
                   Effects* fx);
  // A worker (re)registered, reporting the attempts it still runs: cancels attempts the
  // controller does not run; fails the ranks it placed there that the worker no longer
  // reports.
  void WorkerRegistered(const v1::Register& reg, const std::shared_ptr<WorkerChannel>& channel,
                        Effects* fx);
  // The registry declared `name` lost: its ranks end, their gangs fail.
  void WorkerLost(const std::string& name, const std::string& why, Effects* fx);
  // Unreachable workers (job_lifecycle_workers.cc). Newly unreachable: each active
  // attempt with a live rank there keeps running and gets a warning in its stream
  // ("worker w1 unreachable ...; waiting up to 25s ..."). Its fate: the worker comes
  // back (WorkersReconnected), the window ends (WorkerLost), or the attempt ends for
  // another reason first (ReleaseUnreachable).
  void WorkersUnreachable(const std::vector<UnreachableWorker>& workers, Effects* fx);
  // Workers heard from again: each attempt still running with a live rank there is
  // re-adopted, as the job's stream says ("worker w1 reconnected after 18.2s; attempt
  // 1 re-adopted"). Attempts the controller no longer runs were cancelled when the
  // worker re-registered (WorkerRegistered) or by the Cancel queued on its stream.
  void WorkersReconnected(const std::vector<ReconnectedWorker>& workers, Effects* fx);
  // An attempt that is ending (failed, cancelled, resized, evicted: a rank elsewhere
  // reported the gang broken) or a job that ended does not wait for its ranks on
  // unreachable workers: they end now, as if their worker were lost, so a restart is
  // placed at once. The Cancel stays queued on the worker's stream, and a worker that
  // re-registers with the attempt is told to stop it.
  void ReleaseUnreachable(Effects* fx);
  // GetJob: Job.unreachable_reason while a worker of the running attempt is unreachable.
  void FillUnreachable(const std::string& id, v1::Job* job) const;
  // GPUs a heartbeat took out of service: the active attempt with a rank on one fails
  // ("GPU 3 (GPU-...) of worker w1 unhealthy: <reason> (rank 2 ran on it)") through
  // the restart policy, like any failure (it uses one of restart.max_restarts), blamed
  // on no worker; the next placement cannot use the GPU (WorkerRegistry keeps it out
  // of service).
  void GpusUnhealthy(const std::vector<GpuFault>& faults, Effects* fx);
  // Places pending jobs onto free slots: in queue order (priority, then FIFO), with EASY
  // backfill (GangScheduler::PlanQueue) over the running jobs' estimated ends; updates
  // the pending reason of those that must wait and their estimated start.
  void Schedule(Effects* fx);
  // Ends FAILED every active job whose attempt has run past its job.time_limit_s.
  void EnforceTimeLimits(Effects* fx);
  // The scheduler's view of a PENDING job: its estimated start and the workers reserved
  // for its ranks (the queue's head only), written into `job`. No-op for other jobs.
  void FillEstimate(const std::string& id, v1::Job* job) const;

  // ---- Sharing the fleet (job_lifecycle_sharing.cc) ----
  void ConfigureSharing(const SharingOptions& options) { sharing_ = options; }
  // CheckpointJob: sends a CheckpointRequest to the workers of the job's running
  // attempt; the ranks save at their next step boundary. NOT_FOUND for an unknown job;
  // FAILED_PRECONDITION when it has no checkpoint.dir, is not RUNNING or is stopping.
  absl::StatusOr<CheckpointWant> RequestCheckpoint(const std::string& id, Effects* fx);
  // Whether the job's attempt `want.attempt` is still one that can answer it (the
  // current attempt, active and not torn down).
  bool CheckpointStillPossible(const std::string& id, const CheckpointWant& want, std::string* why) const;
  // DrainWorker, after the cordon: evicts every active job with a rank not ended on
  // `worker` (checkpoint first when it can, then stop; no restart used), whatever its
  // priority or job.preemptible; a job already being preempted is moved by that
  // eviction, which the drain keeps even if its preemptor stops waiting. Returns their
  // ids.
  std::vector<std::string> Drain(const std::string& worker, const std::string& reason, Effects* fx);
  // Stops evicted attempts whose grace ended without their checkpoint (Tick).
  void EnforceEvictions(Effects* fx);
  // Quotas, weights and the usage half-life (--policy-file); in force from the next
  // scheduling pass.
  void SetPolicy(SharingPolicy policy);
  // Adds each owner's running slots since the last call to its fair-share usage and
  // updates the owner gauges (Tick).
  void AccrueUsage();
  // The usage ledger, to store and to restore after a restart.
  std::map<std::string, StoredUsage> UsageSnapshot() const;
  void RestoreUsage(const std::map<std::string, StoredUsage>& usage);
  // The ids of the last pass's queue, in scheduling order.
  const std::vector<std::string>& queue_order() const { return queue_order_; }
  // Where the job's owner stands (Job.share): quota, usage, fair share, and for a
  // PENDING job its place in the queue, as of the last scheduling pass.
  void FillShare(const std::string& id, v1::Job* job) const;

 private:
  static bool IsTerminal(v1::Job::State s);
  static bool IsActive(const TrackedJob& rt);
  void SetState(TrackedJob& rt, v1::Job::State state, const std::string& reason, Effects* fx);
  void StartAttempt(TrackedJob& rt, const GangDecision& decision, Effects* fx);
  void ApplyRankState(TrackedJob& rt, const v1::Event& event, Effects* fx);
  void ApplyStall(TrackedJob& rt, const v1::Event& event, Effects* fx);
  void RankEnded(TrackedJob& rt, int rank, Effects* fx);
  // The worker refused the Assign of `rank` (kRankExitRefused): the worker is held back
  // until it reports its free slots (WorkerRegistry::AssignRefused) and the attempt is
  // placed again like a resize's: no backoff, no restart used, no worker blamed.
  void AssignRefused(TrackedJob& rt, int rank, const v1::RankState& rs, Effects* fx);
  // Whom a failed rank's failure is blamed on, and what the cause adds: while another
  // worker with live ranks of the attempt is unreachable, that worker (the gang most
  // likely broke on it) and " (worker w2 of the attempt unreachable: no heartbeat for
  // 16s)"; else the rank's own worker and "" (job_lifecycle_workers.cc).
  std::pair<std::string, std::string> BlameRankFailure(const TrackedJob& rt, int rank) const;
  // Ends the attempt as failed with `cause`, blamed on `worker` ("": none), and
  // restarts it or fails the job (RestartPolicy).
  // `permanent` (a rank's kRankExitInputError): FAILED at once, restarts unused.
  void FailAttempt(TrackedJob& rt, const std::string& cause, const std::string& worker, Effects* fx,
                   bool permanent = false);
  // Ends each rank of an active attempt placed on `worker` (but the attempts in
  // `still_running`, as (job, attempt)) and fails its attempt with `cause(rank)`,
  // blamed on `worker`, unless it is already ending.
  void EndRanksOn(const std::string& worker, const std::set<std::pair<std::string, int>>* still_running,
                  Effects* fx, const std::function<std::string(int rank)>& cause);

  void SendCancel(TrackedJob& rt, const std::string& reason, Effects* fx);
  // Ends the running attempt without a failure (a resize, an eviction): its ranks get
  // a Cancel with `cancel_reason`, the job goes RESTARTING with `why` and, once they are
  // gone, PENDING, with no backoff; the caller counts the attempt where it belongs, so
  // it uses no restart of restart.max_restarts and no worker is blamed.
  void RestartWithoutFailure(TrackedJob& rt, const std::string& cancel_reason, const std::string& why, Effects* fx);

  // Sharing (job_lifecycle_sharing.cc).
  // Sends a CheckpointRequest to every worker with a live rank of the attempt; returns
  // the step a requested checkpoint must reach to answer it (the step after the last
  // one the controller has heard of).
  int64_t SendCheckpointRequest(TrackedJob& rt, Effects* fx);
  // Asks the attempt to checkpoint and stop (a preemption by job `by`, or a drain with
  // `by` ""): with checkpoint.dir while RUNNING it stops once the requested checkpoint is
  // committed or at the grace deadline; otherwise it stops now. No-op for an attempt
  // already ending.
  void Evict(TrackedJob& rt, const std::string& reason, const std::string& by, Effects* fx);
  // Whether an eviction under way must still stop its attempt: a drain always; a
  // preemption while its preemptor still waits for this attempt (else it is called off).
  bool EvictionStillWanted(const TrackedJob& rt) const;
  // Ends the evicted attempt like a resize does: no backoff, no restart used, no worker
  // blamed; the job goes back to PENDING behind `reason` and keeps its FIFO place.
  void StopEvicted(TrackedJob& rt, const std::string& reason, bool preemption, const std::string& note,
                   Effects* fx);
  // A committed requested checkpoint of the current attempt: answers its request and
  // stops an eviction waiting for it.
  void RequestedCheckpointSaved(TrackedJob& rt, const v1::Event& event, Effects* fx);
  // After a scheduling pass: lets the queue's head (its first job that waits) preempt
  // the lower-priority victims PreemptionPolicy finds, when no preemption is under way.
  // Jobs placed in this pass (`placed_now`) are no victims; slots of attempts already
  // stopping count as free.
  void MaybePreempt(const std::vector<QueuedJob>& queue, const std::vector<GangDecision>& decisions,
                    const std::set<std::string>& placed_now, Effects* fx);
  int PreemptionsInLastHour(const TrackedJob& rt) const;
  // Slots and GPUs held by each owner's ranks that have not ended.
  std::map<std::string, SlotUse> InUseByOwner() const;
  // What a queued job needs under its (maybe resized) spec.
  static SlotUse NeedsOf(const v1::JobSpec& spec);
  // Takes the queued jobs over their owner's or group's quota out of `queue` (with
  // `placed_use` held), giving each its quota reason.
  void HoldOverQuota(std::vector<QueuedJob>* queue, const std::map<std::string, SlotUse>& in_use, Effects* fx);
  void QuotaHold(TrackedJob& rt, const std::string& why, Effects* fx);

  WorkerRegistry* const workers_;
  ControllerMetrics* const metrics_;
  Clock* const clock_;
  EventRateLimiter rate_;
  SharingOptions sharing_;
  SharingPolicy policy_;
  UsageLedger ledger_;
  absl::Time usage_until_ = absl::InfinitePast();  // the ledger holds usage up to here
  std::vector<std::string> queue_order_;  // the PENDING jobs the last pass queued, in order
  // Each owner's slots and GPUs at the last scheduling pass or usage accrual, for
  // FillShare (a GetJob need not walk every job).
  std::map<std::string, SlotUse> owner_use_;
  std::map<std::string, TrackedJob> jobs_;
  int64_t next_order_ = 0;
};

}  // namespace trainyard
