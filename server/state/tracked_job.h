// One job's working state inside JobStateMachine (the current attempt's rank phases,
// its restart backoff, the workers it failed on, its shrunk or resized layout) and what
// is derived from it alone: the Assign for a worker, and the sentences about a restart.
//
// Not thread-safe; owned by JobStateMachine, used under JobManager's state mutex.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "server/policy/elastic_policy.h"
#include "server/policy/gang_scheduler.h"
#include "trainyard/v1/event.pb.h"
#include "trainyard/v1/job.pb.h"
#include "trainyard/v1/worker_service.pb.h"

namespace trainyard {

enum class RankPhase { kAssigned, kRunning, kEnded };

// An attempt being evicted (a preemption or a drain): it was asked to checkpoint and
// stops once a requested checkpoint of at least `min_step` is committed, or at
// `deadline` whatever happened.
struct Eviction {
  std::string reason;  // "preempted by job-5 (priority 10)", "drained from w1: ..."
  absl::Time deadline;
  int64_t min_step = 0;
  bool preemption = true;  // counted against --max-preemptions-per-job (a drain is not)
  std::string by;          // the preemptor; "" for a drain
};

// A victim a preemptor waits for: that job's attempt.
struct Victim {
  std::string id;
  int attempt = 0;
};

struct TrackedJob {
  v1::Job job;
  int64_t order = 0;             // FIFO position
  std::vector<RankPhase> ranks;  // current attempt
  int running = 0;
  int exited_ok = 0;
  int live = 0;                                  // ranks holding a slot
  bool tearing_down = false;                     // a failure or cancel was sent for this attempt
  absl::Time queued_at;                          // when the job last entered PENDING (scheduling latency)
  absl::Time attempt_started;                    // when the current attempt was placed
  int64_t last_step = 0;                         // of the current attempt, from its StepMetrics
  double step_seconds = 0;                       // the last reported step's wall time; 0: none yet
  std::optional<absl::Time> estimated_start;     // PENDING: the scheduler's estimate
  std::vector<std::string> reserved_workers;     // PENDING head: its reservation
  absl::Time not_before = absl::InfinitePast();  // restart backoff: not placed before
  std::map<std::string, int> failures_on;        // worker -> failed attempts blamed on it
  std::optional<ElasticLayout> layout;           // the (next) attempt's shrunk or resized layout
  // A requested resize (ResizeJob) not placed yet: the next attempt runs at exactly
  // this dp. Cleared once an attempt starts, so a failure restart tries the full dp.
  std::optional<int> resize_dp;
  int resizes = 0;  // attempts ended by a resize: they use no restart of max_restarts
  // Attempts ended because a worker refused their Assign (RefusalReason): no restart
  // used either, the controller's own slot count having been wrong.
  int refusals = 0;
  // Earlier attempts' worker of each rank ("" where unknown), for fencing their late
  // artifact uploads: recorded when the next attempt is placed, and after a controller
  // restart rebuilt from the stored RankState events (which the event screen let in
  // only from the rank's worker). The last kMaxPastPlacements attempts are kept.
  std::map<int, std::vector<std::string>> past_placements;
  // One rank's estimated memory under job.spec (RankMemoryOf), once computed.
  std::optional<int64_t> rank_memory;

  // Sharing (EvictionManager).
  std::optional<Eviction> eviction;  // the running attempt is being evicted
  // PENDING after an eviction ("preempted by job-5 (priority 10)"): leads its pending
  // reason until the next attempt is placed.
  std::string evicted_reason;
  // PENDING and preempting: the victims it waits for and when their grace ends.
  std::vector<Victim> preempting;
  absl::Time preempting_until;
  // PENDING: place in scheduling order at the last pass (1-based; 0: not queued).
  int queue_position = 0;
};

inline constexpr int kMaxPastPlacements = 64;

// Whether `rank` indexes the current attempt's rank table (a rank an event or a
// placement names may not).
inline bool HasRank(const TrackedJob& rt, int rank) { return rank >= 0 && rank < static_cast<int>(rt.ranks.size()); }
// The controller's event for a job entering `state` (rank -1).
v1::Event JobStateEvent(v1::Job::State state, const std::string& reason, int attempt, absl::Time now);
// A controller-written log line (rank -1) of `attempt`, for a job's event stream.
v1::Event ControllerLog(const std::string& level, const std::string& message, int attempt, absl::Time now);
// Notes a StepMetrics of the current attempt (its step, the step's wall time).
void NoteStep(TrackedJob& rt, const v1::StepMetrics& step);
// How long until an active job's slots free: remaining steps at the measured step
// time, bounded by its time limit; zero while its ranks are being stopped; nullopt
// when neither is known.
std::optional<absl::Duration> RemainingTime(const TrackedJob& rt, absl::Time now);
// A PENDING job with a requested resize below its dp: sets `layout` to the resized
// spec (ElasticPolicy::Resize) and returns it; nullptr when the resize is to the full
// dp (the spec as submitted), or when the stored target is no longer valid (then the
// resize is dropped and logged).
const v1::JobSpec* ResizedSpec(TrackedJob& rt);
// Restarts of restart.max_restarts used by the attempts before the current one (those
// ended by a resize, an eviction or a refused Assign used none).
int RestartsUsed(const TrackedJob& rt);
// The RESTARTING reason of an attempt whose Assign `worker` refused for `rank`
// (kRankExitRefused, `message` the worker's), and whether a reason is one (for
// recovery, which counts such attempts in `refusals` from the stored events).
std::string RefusalReason(const std::string& worker, int rank, int attempt, const std::string& message);
bool IsRefusalReason(const std::string& reason);

// A CUDA job's estimated memory of one rank under `spec` (spec::EstimateRankMemory),
// which the scheduler compares with each GPU's; 0 for a CPU job or a spec the core
// refuses. Computed once per job for its own spec (TrackedJob::rank_memory).
int64_t RankMemoryOf(TrackedJob& rt, const v1::JobSpec& spec);

// The worker of `rank` in the current placement, or "".
std::string WorkerOf(const TrackedJob& rt, int rank);
// Workers the job failed on at least RestartPolicy::kAvoidAfterFailures times.
std::vector<std::string> AvoidedWorkers(const TrackedJob& rt);
// A PENDING job after a restart with restart.min_dp > 0: when it may shrink
// (restart.elastic_wait_s after it became PENDING or its backoff ended); else nullopt.
std::optional<absl::Time> ElasticFrom(const TrackedJob& rt);
// A restarting PENDING job's reason: backing off until ..., or waiting for slots.
std::string RestartPendingReason(const TrackedJob& rt, absl::Time now);
// The Assign of `ranks` of the attempt just placed: the spec (or the shrunk layout's),
// checkpoint_dir when checkpoints are on, resume_path/step from Job.last_checkpoint.
v1::ControllerMessage AssignFor(const TrackedJob& rt, const std::vector<int>& ranks);
// What the SCHEDULED reason adds to "placed on ...": the elastic layout, avoided
// workers; "" when neither.
std::string PlacementNote(const TrackedJob& rt, const GangDecision& decision, absl::Time now);
// A committed CheckpointSaved of the current attempt becomes Job.last_checkpoint when
// it comes from rank 0 and is newer; returns whether it did.
bool RecordCheckpoint(TrackedJob& rt, const v1::Event& event);
// At recovery: records the newest checkpoint among a job's stored events. A checkpoint
// event is committed before the job row that records it, so a crash between the two
// leaves it only in the stream (its batch acked, never resent). True when it was newer.
bool RestoreCheckpoint(TrackedJob& rt, const std::vector<v1::Event>& events);
// At recovery, from `events` (the job's stored ones): a restart's backoff counts from
// its failure, the failed attempt's first RESTARTING event; attempts whose first
// RESTARTING event is a resize's (ResizePolicy::TargetOf) are counted in `resizes`, a
// refusal's (IsRefusalReason) in `refusals`, and
// a resize of the current attempt not placed yet is restored as `resize_dp`. Worker
// avoidance is not stored: a recovered job may be placed on a worker it avoided.
void RestoreBackoff(TrackedJob& rt, const std::vector<v1::Event>& events);
// After a controller restart: each earlier attempt's worker per rank, from the stored
// RankState events (which event fencing let in only from the rank's worker); the
// newest kMaxPastPlacements attempts are kept.
void RestorePastPlacements(TrackedJob& rt, const std::vector<v1::Event>& events);
// The eviction a RESTARTING reason is ("preempted by job-5 (priority 10)", "drained
// from w1: kernel update"; EvictionManager::StopEvicted writes exactly that), "" for any
// other reason.
std::string EvictionOf(const std::string& reason);
// An active job as the scheduler sees it: the workers of its ranks still running, and
// when it is expected to give them back.
RunningJob RunningJobOf(const TrackedJob& rt, absl::Time now);
// `why` led by the eviction that sent the job back to PENDING, if one did
// ("preempted by job-5 (priority 10); <why>").
std::string AfterEviction(const TrackedJob& rt, const std::string& why);
// A PENDING job's reason: the scheduler's, plus what a requested resize or an elastic
// restart adds ("; resize to dp=1 of 2 requested", "; elastic: may restart at ..."),
// and the victims it preempts.
std::string PendingReasonOf(const TrackedJob& rt, const GangDecision& decision, absl::Time now);
// The failure cause a Stall names: "rank 2 stalled in allreduce #42 for 300 s waiting
// for rank 3: <message>".
std::string StallCause(const v1::Event& event);

}  // namespace trainyard
