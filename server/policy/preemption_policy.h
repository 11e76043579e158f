// Which running jobs a pending job that cannot be placed may preempt, and where it then
// runs. Pure: no I/O, no locks, no clock (times come in as values).
//
// The rule (issue 29):
// - A candidate may be a victim only when its priority is strictly lower than the
//   pending job's (spec.job.priority), it is preemptible (job.preemptible), and it was
//   preempted at most `max_preemptions_per_hour` times in the last hour (a job
//   preempted more than that is not preempted again; a negative cap preempts nothing).
// - Eligible candidates are ordered: priority ascending, then the start of their
//   current attempt descending (the most recently started loses least work), then id
//   descending.
// - Fewest first: the first candidate in that order whose capacity alone places the
//   pending job (GangScheduler::PlaceQueued on the free plus freed capacity) is the one
//   victim.
// - Else they are added one by one in that order, each giving back its ranks'
//   capacity, until the pending job places.
// - Then every victim whose capacity turns out not to be needed is dropped, the
//   newest-added first: the job is placed again without it, and if it still places the
//   victim is spared.
// - Cordoned workers take no new ranks: they are left out of placement altogether, so
//   what a victim frees there is never counted. Workers not in `workers` (disconnected)
//   gain nothing either.
// - No plan when even every eligible candidate together does not make the job fit.
//
// A victim's rank gives back one slot on its worker and, for a CUDA rank (rank_gpus[i]
// >= 0), its GPU (GpuView.held = false; an unhealthy GPU stays unusable).
//
// Thread-safe (stateless).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "server/policy/gang_scheduler.h"

namespace trainyard {

// A RUNNING or SCHEDULED job that might be preempted.
struct PreemptionCandidate {
  std::string id;
  int priority = 0;         // spec.job.priority
  bool preemptible = true;  // spec.job.preemptible
  int preemptions_last_hour = 0;
  absl::Time attempt_started = absl::InfinitePast();  // start of its current attempt
  std::vector<std::string> rank_workers;              // the worker of each rank it holds
  std::vector<int> rank_gpus;                         // the GPU of each of rank_workers (-1: none); empty: a CPU job
};

struct PreemptionPlan {
  std::vector<std::string> victims;  // in the order they were chosen
  GangDecision placement;            // the pending job on free + freed capacity
};

class PreemptionPolicy {
 public:
  // The victims and placement for `pending` under the rule above, or nullopt. When the
  // job already places on `workers` (cordoned ones left out) the plan has no victims.
  // `workers`: free capacity as GangScheduler::PlaceQueued takes it.
  static std::optional<PreemptionPlan> Plan(const QueuedJob& pending, const std::vector<WorkerSnapshot>& workers,
                                            const std::vector<PreemptionCandidate>& candidates,
                                            int max_preemptions_per_hour);

  // Whether `c` may be preempted for a job of `priority` (the first rule above).
  static bool Eligible(const PreemptionCandidate& c, int priority, int max_preemptions_per_hour);

  // `workers` without the cordoned ones, with what `victims` hold given back.
  static std::vector<WorkerSnapshot> Freed(const std::vector<WorkerSnapshot>& workers,
                                           const std::vector<const PreemptionCandidate*>& victims);
};

}  // namespace trainyard
