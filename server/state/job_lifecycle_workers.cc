// JobLifecycle: what a worker's registration, loss or GPU fault does to the jobs placed on it.
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/state/job_lifecycle.h"
#include "spdlog/spdlog.h"

namespace trainyard {

void JobLifecycle::WorkerRegistered(const v1::Register& reg,
                                    const std::shared_ptr<WorkerChannel>& channel,
                                    Effects* fx) {
  // Reconcile what the worker runs with what the controller believes.
  std::set<std::pair<std::string, int>> reported;
  for (const auto& ra : reg.running()) {
    reported.insert({ra.job_id(), ra.attempt()});
    // Ended while the controller was away: nothing to cancel, and the ranks' final
    // states follow on this stream (the worker resends what was not acknowledged).
    if (ra.ended()) continue;
    auto it = jobs_.find(ra.job_id());
    bool wanted = it != jobs_.end() && it->second.job.attempt() == ra.attempt() &&
                  IsActive(it->second) && !it->second.tearing_down;
    if (!wanted) {
      v1::ControllerMessage cancel;
      cancel.mutable_cancel()->set_job_id(ra.job_id());
      cancel.mutable_cancel()->set_attempt(ra.attempt());
      cancel.mutable_cancel()->set_reason("the controller does not run this attempt");
      fx->Send(channel, std::move(cancel));
    }
  }
  EndRanksOn(reg.name(), &reported, fx, [&](int rank) {
    return absl::StrCat("rank ", rank, " on worker ", reg.name(), " is gone (the worker restarted)");
  });
}

void JobLifecycle::WorkerLost(const std::string& name, const std::string& why, Effects* fx) {
  EndRanksOn(name, nullptr, fx,
             [&](int rank) { return absl::StrCat("worker ", name, " lost (", why, ") running rank ", rank); });
}

void JobLifecycle::EndRanksOn(const std::string& worker, const std::set<std::pair<std::string, int>>* still_running,
                              Effects* fx, const std::function<std::string(int rank)>& cause) {
  for (auto& [id, rt] : jobs_) {
    if (rt.live == 0 || (still_running != nullptr && still_running->count({id, rt.job.attempt()}))) continue;
    for (const auto& r : rt.job.placement().ranks()) {
      if (r.worker() != worker || !HasRank(rt, r.rank()) || rt.ranks[r.rank()] == RankPhase::kEnded) continue;
      RankEnded(rt, r.rank(), fx);
      if (!IsTerminal(rt.job.state()) && !rt.tearing_down) FailAttempt(rt, cause(r.rank()), worker, fx);
    }
  }
}

void JobLifecycle::GpusUnhealthy(const std::vector<GpuFault>& faults, Effects* fx) {
  for (const auto& f : faults) {
    const std::optional<GpuHolder> holder = workers_->GpuHeldBy(f.worker, f.index);
    if (!holder) continue;
    auto it = jobs_.find(holder->job_id);
    if (it == jobs_.end()) continue;
    TrackedJob& rt = it->second;
    if (rt.job.attempt() != holder->attempt || !IsActive(rt) || rt.tearing_down) continue;
    if (!HasRank(rt, holder->rank) || rt.ranks[holder->rank] == RankPhase::kEnded) continue;
    // Not blamed on the worker: one bad GPU is out of service, its other GPUs are fine.
    FailAttempt(rt,
                absl::StrCat("GPU ", f.index, " (", f.uuid, ") of worker ", f.worker, " unhealthy: ",
                             f.reason.empty() ? std::string("no reason given") : f.reason, " (rank ", holder->rank,
                             " ran on it)"),
                "", fx);
  }
}

}  // namespace trainyard
