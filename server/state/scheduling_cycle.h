#pragma once

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "common/base/clock.h"
#include "server/policy/gang_scheduler.h"
#include "server/state/effects.h"
#include "server/state/eviction_manager.h"
#include "server/state/fair_share_manager.h"
#include "server/state/job_state_machine.h"
#include "server/state/queue_gate.h"
#include "server/state/worker_registry.h"

namespace trainyard {

// One scheduling pass, as a fixed order of stages (the Kubernetes scheduler
// framework's shape):
//   1. enqueue: each PENDING job, as its next attempt would run (a resize's or an
//      elastic shrink's spec), passes the registered QueueGates in order; a held job
//      waits apart with the gate's reason, blocks nobody and gets no reservation;
//   2. sort: priority, then the owner's fair share, then FIFO (FairShareManager);
//   3. plan: gang placement with EASY backfill over the running jobs' estimated ends
//      (GangScheduler::PlanQueue); two jobs of one owner placed together past its
//      quota: the later one waits, and the pass is planned again without it;
//   4. bind: placed jobs start their attempts; the others get their pending reason,
//      estimated start, reservation (the head) and queue position;
//   5. post-filter: the queue's head may preempt lower-priority jobs (EvictionManager).
//
// Not thread-safe; owned by JobManager, run only under its state mutex.
class SchedulingCycle {
 public:
  SchedulingCycle(JobStateMachine* jobs, FairShareManager* fair_share, EvictionManager* evictions,
                  WorkerRegistry* workers, Clock* clock)
      : jobs_(jobs), fair_share_(fair_share), evictions_(evictions), workers_(workers), clock_(clock) {}

  // Adds a gate after those already registered.
  void AddGate(std::unique_ptr<QueueGate> gate) { gates_.push_back(std::move(gate)); }

  // One pass over the PENDING jobs; every transition it makes is recorded in `fx`.
  void Run(Effects* fx);

  // The ids of the last pass's queue (the jobs that wait, not those gates held), in
  // scheduling order.
  const std::vector<std::string>& queue_order() const { return queue_order_; }

 private:
  std::vector<QueuedJob> Enqueue(absl::Time now, Effects* fx);
  // Plans `queue`, dropping from it the jobs that would pass a quota together with an
  // earlier one; returns one decision per job left.
  std::vector<GangDecision> Plan(std::vector<QueuedJob>* queue, Effects* fx);
  // Starts the placed jobs; returns their ids.
  std::set<std::string> Bind(const std::vector<QueuedJob>& queue, const std::vector<GangDecision>& decisions,
                             absl::Time now, Effects* fx);
  // Takes a job out of this pass with `reason`: no estimate, no reservation, no place.
  void Hold(TrackedJob& rt, const std::string& reason, Effects* fx);

  JobStateMachine* const jobs_;
  FairShareManager* const fair_share_;
  EvictionManager* const evictions_;
  WorkerRegistry* const workers_;
  Clock* const clock_;
  std::vector<std::unique_ptr<QueueGate>> gates_;
  std::vector<std::string> queue_order_;
};

}  // namespace trainyard
