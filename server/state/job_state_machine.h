#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "common/base/clock.h"
#include "server/metrics/controller_metrics.h"
#include "server/policy/event_fencing.h"
#include "server/policy/gang_scheduler.h"
#include "server/state/effects.h"
#include "server/state/event_rate_limit.h"
#include "server/state/tracked_job.h"
#include "server/state/worker_registry.h"
#include "trainyard/v1/event.pb.h"
#include "trainyard/v1/job.pb.h"

namespace trainyard {

// The job state machine: PENDING → SCHEDULED → RUNNING → SUCCEEDED | FAILED |
// CANCELLED, with RESTARTING after a failure while the restart policy allows. It owns
// the table of tracked jobs (each one's rank phases of the current attempt, and the
// slot and port holds it takes in the worker registry), turns committed events into
// transitions, and rebuilds itself from stored jobs and events after a restart.
//
// Restarts (RestartPolicy): each failed attempt's cause is appended to
// Job.failure_causes; restart k waits restart.backoff_s·2^(k-1) from the failure
// before it may be placed (RestartBackoffGate keeps it out of the queue); a worker
// where the job failed twice is avoided when a placement without it exists. A
// CheckpointSaved of the current attempt becomes Job.last_checkpoint, which the next
// attempt resumes from. A requested resize (ResizePolicy) ends the running attempt
// like a restart, without backoff and without using a restart, and so does a worker's
// refusal of an Assign (kRankExitRefused): the controller's slot count was wrong, not
// the rank or the worker.
//
// Other managers act on jobs through it: the scheduling cycle starts attempts, the
// eviction manager stops them without a failure, worker faults fail them. Listeners
// hear of a job that ended (AddEndedListener, as Ray's GCS AddNodeRemovedListener) and
// of a committed checkpoint (AddCheckpointListener), inside the transition, so what
// they record follows it in the same Effects.
//
// It does no I/O: every transition is recorded in the caller's Effects (the job row,
// then a job_state event), and so is every Assign and Cancel for a worker, after the
// writes that name it. Metrics and logs are written directly.
//
// Not thread-safe; owned by JobManager, used (with the registry it shares) only under
// its state mutex.
class JobStateMachine {
 public:
  // Called once when a job enters SUCCEEDED, FAILED or CANCELLED, after its row and
  // terminal event were recorded.
  using EndedListener = std::function<void(const TrackedJob& ended, Effects* fx)>;
  // Called for each committed CheckpointSaved of a job's current attempt, after it was
  // recorded as the job's last checkpoint (when it was the newest).
  using CheckpointListener = std::function<void(TrackedJob& rt, const v1::Event& checkpoint, Effects* fx)>;

  // max_events_per_s_per_rank: EventRateLimiter's rate for each rank of a job (<= 0:
  // no limit), with ten seconds' worth of burst.
  JobStateMachine(WorkerRegistry* workers, ControllerMetrics* metrics, Clock* clock,
                  double max_events_per_s_per_rank = 0);

  // A new job of `owner` for an admitted (normalised) spec, PENDING, created `now`, and
  // its first event (*first: the PENDING job_state), for the caller to commit together.
  static v1::Job NewJob(v1::JobSpec normalised, const std::string& owner, absl::Time now, v1::Event* first);
  static bool IsTerminal(v1::Job::State s);
  // Placed and not ended: SCHEDULED, RUNNING or RESTARTING.
  static bool IsActive(const TrackedJob& rt);

  void AddEndedListener(EndedListener listener) { ended_listeners_.push_back(std::move(listener)); }
  void AddCheckpointListener(CheckpointListener listener) { checkpoint_listeners_.push_back(std::move(listener)); }

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
  // Adopts a job whose PENDING row was just committed; returns its FIFO position.
  int64_t Add(v1::Job job);
  // Event compaction marked the job compacted: its row keeps the marker in every later
  // write.
  void MarkCompacted(const std::string& id, const v1::Compaction& compaction);

  bool Contains(const std::string& id) const { return jobs_.count(id) > 0; }
  // Ended (a terminal state) with every rank of its last attempt ended: its event
  // stream is closed, and events that still arrive for it are dropped, not appended.
  bool Closed(const std::string& id) const;
  TrackedJob* Find(const std::string& id);
  const TrackedJob* Find(const std::string& id) const;
  // Every tracked job, by id. Jobs are never removed.
  std::map<std::string, TrackedJob>& jobs() { return jobs_; }
  const std::map<std::string, TrackedJob>& jobs() const { return jobs_; }

  // NOT_FOUND for an unknown job, FAILED_PRECONDITION for one that already ended.
  absl::Status Cancel(const std::string& id, const std::string& reason, Effects* fx);
  // Restarts the job at data-parallel degree `dp` from its last checkpoint
  // (ResizePolicy::Plan says when it may): a running attempt is cancelled and the job
  // goes RESTARTING; a restarting or PENDING one only changes the dp its restart
  // places. NOT_FOUND for an unknown job; OK without a change when already at `dp`.
  absl::Status Resize(const std::string& id, int dp, Effects* fx);
  // The worker of each rank (index = rank; "" where unknown) of attempt `attempt` of
  // job `id`: the current attempt's placement, or an earlier one's as recorded (see
  // TrackedJob::past_placements); nullopt when this controller does not know it.
  std::optional<std::vector<std::string>> AttemptWorkers(const std::string& id, int attempt) const;
  // Before a commit: removes from `events` (one job's, sent by worker `worker`) those
  // that must not be stored (event_fencing, and events past the job's rate:
  // EventRateLimiter) and returns why each was refused. Unknown jobs are the caller's.
  std::vector<EventRefusal> Screen(const std::string& worker, const std::string& job_id,
                                   std::vector<v1::Event>* events);
  // Acts on a job's newly committed events of the current attempt: RankState, a Stall
  // (a failure), a CheckpointSaved (the job's last_checkpoint, then the listeners).
  void ApplyEvents(const std::string& job_id, const std::vector<v1::Event>& committed, Effects* fx);
  // Ends FAILED every active job whose attempt has run past its job.time_limit_s.
  void EnforceTimeLimits(Effects* fx);
  // The scheduler's view of a PENDING job: its estimated start and the workers reserved
  // for its ranks (the queue's head only), written into `job`. No-op for other jobs.
  void FillEstimate(const std::string& id, v1::Job* job) const;

  // ---- Transitions, for the managers that act on jobs ----
  // Records the job's move to `state` (its row, then its job_state event); a terminal
  // state tells the ended-job listeners.
  void SetState(TrackedJob& rt, v1::Job::State state, const std::string& reason, Effects* fx);
  // Places the next attempt as `decision` says: holds, the SCHEDULED row, then Assigns.
  void StartAttempt(TrackedJob& rt, const GangDecision& decision, Effects* fx);
  // Ends `rank` of the current attempt: its slot, GPU and (the last rank) port are
  // released; a RESTARTING job whose last rank ended goes PENDING.
  void RankEnded(TrackedJob& rt, int rank, Effects* fx);
  // Ends the attempt as failed with `cause`, blamed on `worker` ("": none), and
  // restarts it or fails the job (RestartPolicy).
  // `permanent` (a rank's kRankExitInputError): FAILED at once, restarts unused.
  void FailAttempt(TrackedJob& rt, const std::string& cause, const std::string& worker, Effects* fx,
                   bool permanent = false);
  // Ends the running attempt without a failure (a resize, an eviction): its ranks get
  // a Cancel with `cancel_reason`, the job goes RESTARTING with `why` and, once they are
  // gone, PENDING, with no backoff; the caller counts the attempt where it belongs, so
  // it uses no restart of restart.max_restarts and no worker is blamed.
  void RestartWithoutFailure(TrackedJob& rt, const std::string& cancel_reason, const std::string& why, Effects* fx);
  // A Cancel of the current attempt to each worker with a live rank of it.
  void SendCancel(TrackedJob& rt, const std::string& reason, Effects* fx);

 private:
  void ApplyRankState(TrackedJob& rt, const v1::Event& event, Effects* fx);
  void ApplyStall(TrackedJob& rt, const v1::Event& event, Effects* fx);
  // The worker refused the Assign of `rank` (kRankExitRefused): the worker is held back
  // until it reports its free slots (WorkerRegistry::AssignRefused) and the attempt is
  // placed again like a resize's: no backoff, no restart used, no worker blamed.
  void AssignRefused(TrackedJob& rt, int rank, const v1::RankState& rs, Effects* fx);
  // Whom a failed rank's failure is blamed on, and what the cause adds: while another
  // worker with live ranks of the attempt is unreachable, that worker (the gang most
  // likely broke on it) and " (worker w2 of the attempt unreachable: no heartbeat for
  // 16s)"; else the rank's own worker and "".
  std::pair<std::string, std::string> BlameRankFailure(const TrackedJob& rt, int rank) const;

  WorkerRegistry* const workers_;
  ControllerMetrics* const metrics_;
  Clock* const clock_;
  EventRateLimiter rate_;
  std::vector<EndedListener> ended_listeners_;
  std::vector<CheckpointListener> checkpoint_listeners_;
  std::map<std::string, TrackedJob> jobs_;
  int64_t next_order_ = 0;
};

}  // namespace trainyard
