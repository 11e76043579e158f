#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/base/clock.h"
#include "server/metrics/controller_metrics.h"
#include "server/policy/gang_scheduler.h"
#include "server/state/effects.h"
#include "server/state/job_state_machine.h"
#include "server/state/tracked_job.h"
#include "server/state/worker_registry.h"

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

// Evictions: an attempt stopped so its slots serve another job, a preemption by a
// higher-priority job or a drain of a worker. An evicted attempt with checkpoint.dir is
// asked to checkpoint first and stops once that checkpoint is committed or at the
// grace deadline; either way it uses no restart, no worker is blamed and the job goes
// back to PENDING behind the eviction's reason, keeping its FIFO place. Also the
// checkpoints a CheckpointJob requests, which evictions use.
//
// After each scheduling pass (its post-filter stage) the queue's head may preempt the
// lower-priority victims PreemptionPolicy finds, one preemption at a time.
//
// Not thread-safe; owned by JobManager, used only under its state mutex. It listens to
// `jobs` for committed checkpoints.
class EvictionManager {
 public:
  EvictionManager(JobStateMachine* jobs, WorkerRegistry* workers, ControllerMetrics* metrics, Clock* clock,
                  SharingOptions options);

  // CheckpointJob: sends a CheckpointRequest to the workers of the job's running
  // attempt; the ranks save at their next step boundary. NOT_FOUND for an unknown job;
  // FAILED_PRECONDITION when it has no checkpoint.dir, is not RUNNING or is stopping.
  absl::StatusOr<CheckpointWant> RequestCheckpoint(const std::string& id, Effects* fx);
  // Whether the job's attempt `want.attempt` is still one that can answer it (the
  // current attempt, active and not torn down).
  bool CheckpointStillPossible(const std::string& id, const CheckpointWant& want, std::string* why) const;
  // DrainWorker, after the cordon: evicts every active job with a rank not ended on
  // `worker`, whatever its priority or job.preemptible; a job already being preempted
  // is moved by that eviction, which the drain keeps even if its preemptor stops
  // waiting. Returns their ids.
  std::vector<std::string> Drain(const std::string& worker, const std::string& reason, Effects* fx);
  // Stops evicted attempts whose grace ended without their checkpoint (Tick).
  void EnforceEvictions(Effects* fx);
  // After a scheduling pass: lets the queue's head (its first job that waits) preempt
  // the lower-priority victims PreemptionPolicy finds, when no preemption is under way.
  // Jobs placed in this pass (`placed_now`) are no victims; slots of attempts already
  // stopping count as free.
  void MaybePreempt(const std::vector<QueuedJob>& queue, const std::vector<GangDecision>& decisions,
                    const std::set<std::string>& placed_now, Effects* fx);

 private:
  // Sends a CheckpointRequest to every worker with a live rank of the attempt; returns
  // the step a requested checkpoint must reach to answer it.
  int64_t SendCheckpointRequest(TrackedJob& rt, Effects* fx);
  // Asks the attempt to checkpoint and stop (a preemption by job `by`, or a drain with
  // `by` ""): with checkpoint.dir while RUNNING it stops once the requested checkpoint is
  // committed or at the grace deadline; otherwise it stops now. No-op for an attempt
  // already ending.
  void Evict(TrackedJob& rt, const std::string& reason, const std::string& by, Effects* fx);
  // Whether an eviction under way must still stop its attempt: a drain always; a
  // preemption while its preemptor still waits for this attempt (else it is called off).
  bool EvictionStillWanted(const TrackedJob& rt) const;
  void StopEvicted(TrackedJob& rt, const std::string& reason, bool preemption, const std::string& note, Effects* fx);
  // A committed requested checkpoint of the current attempt: stops an eviction waiting
  // for it (JobStateMachine's checkpoint listener).
  void RequestedCheckpointSaved(TrackedJob& rt, const v1::Event& event, Effects* fx);
  int PreemptionsInLastHour(const TrackedJob& rt) const;

  JobStateMachine* const jobs_;
  WorkerRegistry* const workers_;
  ControllerMetrics* const metrics_;
  Clock* const clock_;
  const SharingOptions options_;
};

}  // namespace trainyard
