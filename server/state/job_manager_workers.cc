// JobManager's periodic worker bookkeeping: workers that became unreachable, came back
// or were lost since the last Tick (WorkerRegistry::Tick), and what that does to jobs.
#include "server/state/job_manager.h"

namespace trainyard {

void JobManager::TickWorkersLocked(Effects* fx) {
  WorkerChanges changes = registry_.Tick(fx);
  // Back first: a worker heard from again before this Tick is not waited for.
  faults_.WorkersReconnected(changes.reconnected, fx);
  faults_.WorkersUnreachable(changes.unreachable, fx);
  for (const auto& l : changes.lost) {
    faults_.WorkerLost(l.name, l.why, fx);
    metrics_->gpus().RemoveWorker(l.name);
  }
  if (!changes.lost.empty()) metrics_->WorkersLost(static_cast<int>(changes.lost.size()));
  faults_.ReleaseUnreachable(fx);
}

}  // namespace trainyard
