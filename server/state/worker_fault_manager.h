#pragma once

#include <functional>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/base/clock.h"
#include "server/state/effects.h"
#include "server/state/job_state_machine.h"
#include "server/state/worker_channel.h"
#include "server/state/worker_registry.h"
#include "trainyard/v1/job.pb.h"
#include "trainyard/v1/worker_service.pb.h"

namespace trainyard {

// What a worker's registration, unreachability, return, loss or GPU fault does to the
// jobs placed on it (the registry decides when a worker is each of these).
//
// Not thread-safe; owned by JobManager, used only under its state mutex.
class WorkerFaultManager {
 public:
  WorkerFaultManager(JobStateMachine* jobs, WorkerRegistry* workers, Clock* clock)
      : jobs_(jobs), workers_(workers), clock_(clock) {}

  // A worker (re)registered, reporting the attempts it still runs: cancels attempts the
  // controller does not run; fails the ranks it placed there that the worker no longer
  // reports.
  void WorkerRegistered(const v1::Register& reg, const std::shared_ptr<WorkerChannel>& channel, Effects* fx);
  // The registry declared `name` lost: its ranks end, their gangs fail.
  void WorkerLost(const std::string& name, const std::string& why, Effects* fx);
  // Newly unreachable workers: each active attempt with a live rank there keeps
  // running and gets a warning in its stream ("worker w1 unreachable ...; waiting up to
  // 25s ..."). Its fate: the worker comes back (WorkersReconnected), the window ends
  // (WorkerLost), or the attempt ends for another reason first (ReleaseUnreachable).
  void WorkersUnreachable(const std::vector<UnreachableWorker>& workers, Effects* fx);
  // Workers heard from again: each attempt still running with a live rank there is
  // re-adopted, as the job's stream says ("worker w1 reconnected after 18.2s; attempt
  // 1 re-adopted"). Attempts the controller no longer runs were cancelled when the
  // worker re-registered (WorkerRegistered) or by the Cancel queued on its stream.
  void WorkersReconnected(const std::vector<ReconnectedWorker>& workers, Effects* fx);
  // An attempt that is ending (failed, cancelled, resized, evicted) or a job that ended
  // does not wait for its ranks on unreachable workers: they end now, as if their
  // worker were lost, so a restart is placed at once. The Cancel stays queued on the
  // worker's stream, and a worker that re-registers with the attempt is told to stop it.
  void ReleaseUnreachable(Effects* fx);
  // GetJob: Job.unreachable_reason while a worker of the running attempt is unreachable.
  void FillUnreachable(const std::string& id, v1::Job* job) const;
  // GPUs a heartbeat took out of service: the active attempt with a rank on one fails
  // ("GPU 3 (GPU-...) of worker w1 unhealthy: <reason> (rank 2 ran on it)") through
  // the restart policy, like any failure, blamed on no worker; the next placement
  // cannot use the GPU (WorkerRegistry keeps it out of service).
  void GpusUnhealthy(const std::vector<GpuFault>& faults, Effects* fx);

 private:
  // Ends each rank of an active attempt placed on `worker` (but the attempts in
  // `still_running`, as (job, attempt)) and fails its attempt with `cause(rank)`,
  // blamed on `worker`, unless it is already ending.
  void EndRanksOn(const std::string& worker, const std::set<std::pair<std::string, int>>* still_running, Effects* fx,
                  const std::function<std::string(int rank)>& cause);

  JobStateMachine* const jobs_;
  WorkerRegistry* const workers_;
  Clock* const clock_;
};

}  // namespace trainyard
