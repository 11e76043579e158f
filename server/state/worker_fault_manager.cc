#include "server/state/worker_fault_manager.h"

#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/proto_time.h"
#include "spdlog/spdlog.h"

namespace trainyard {
namespace {

std::string TimeOfDay(absl::Time t) { return absl::FormatTime("%H:%M:%SZ", t, absl::UTCTimeZone()); }

// Ranks of the current attempt placed on `worker` that have not ended.
std::vector<int> LiveRanksOn(const TrackedJob& rt, const std::string& worker) {
  std::vector<int> out;
  if (rt.live == 0) return out;
  for (const auto& r : rt.job.placement().ranks()) {
    if (r.worker() == worker && HasRank(rt, r.rank()) && rt.ranks[r.rank()] != RankPhase::kEnded) {
      out.push_back(r.rank());
    }
  }
  return out;
}

}  // namespace

void WorkerFaultManager::WorkersUnreachable(const std::vector<UnreachableWorker>& workers, Effects* fx) {
  for (const UnreachableWorker& w : workers) {
    for (auto& [id, rt] : jobs_->jobs()) {
      if (!JobStateMachine::IsActive(rt) || rt.tearing_down) continue;
      const std::vector<int> ranks = LiveRanksOn(rt, w.name);
      if (ranks.empty()) continue;
      const std::string msg = absl::StrCat(
          "worker ", w.name, " unreachable (", w.why, ") running rank", ranks.size() > 1 ? "s " : " ",
          absl::StrJoin(ranks, ","), "; attempt ", rt.job.attempt(), " keeps running, waiting up to ",
          absl::ToInt64Seconds(w.deadline - w.since), "s (until ", TimeOfDay(w.deadline), ") for it to reconnect");
      spdlog::warn("job={} {}", id, msg);
      fx->AppendEvent(id, ControllerLog("warn", msg, rt.job.attempt(), clock_->Now()));
    }
  }
}

void WorkerFaultManager::WorkersReconnected(const std::vector<ReconnectedWorker>& workers, Effects* fx) {
  for (const ReconnectedWorker& w : workers) {
    for (auto& [id, rt] : jobs_->jobs()) {
      if (!JobStateMachine::IsActive(rt) || rt.tearing_down || LiveRanksOn(rt, w.name).empty()) continue;
      const std::string msg =
          absl::StrFormat("worker %s reconnected after %.1fs%s; attempt %d re-adopted", w.name,
                          absl::ToDoubleSeconds(w.silent), w.registered ? " (registered again)" : "", rt.job.attempt());
      spdlog::info("job={} {}", id, msg);
      fx->AppendEvent(id, ControllerLog("info", msg, rt.job.attempt(), clock_->Now()));
    }
  }
}

void WorkerFaultManager::ReleaseUnreachable(Effects* fx) {
  if (!workers_->AnyUnreachable()) return;
  for (auto& [id, rt] : jobs_->jobs()) {
    if (rt.live == 0 || (!rt.tearing_down && !JobStateMachine::IsTerminal(rt.job.state()))) continue;
    for (const auto& r : rt.job.placement().ranks()) {
      if (!HasRank(rt, r.rank()) || rt.ranks[r.rank()] == RankPhase::kEnded) continue;
      if (!workers_->Unreachable(r.worker())) continue;
      spdlog::warn("job={} attempt={}: rank {} on unreachable worker {} counted as ended (the attempt is ending)", id,
                   rt.job.attempt(), r.rank(), r.worker());
      jobs_->RankEnded(rt, r.rank(), fx);
      // The job is done with it, the worker is not: the rank may well still run there,
      // so its slot (and GPU) stay busy until the worker reports it gone.
      workers_->HoldStray(r.worker(), StrayRank{id, rt.job.attempt(), r.rank(), r.has_gpu() ? r.gpu() : -1});
    }
  }
}

void WorkerFaultManager::FillUnreachable(const std::string& id, v1::Job* job) const {
  auto it = jobs_->jobs().find(id);
  if (it == jobs_->jobs().end() || !JobStateMachine::IsActive(it->second) || it->second.tearing_down) return;
  std::set<std::string> seen;
  std::vector<std::string> parts;
  for (const auto& r : it->second.job.placement().ranks()) {
    if (!seen.insert(r.worker()).second || LiveRanksOn(it->second, r.worker()).empty()) continue;
    const std::optional<UnreachableWorker> u = workers_->Unreachable(r.worker());
    if (!u) continue;
    parts.push_back(absl::StrCat("waiting up to ", absl::ToInt64Seconds(u->deadline - u->since), "s (until ",
                                 TimeOfDay(u->deadline), ") for worker ", u->name, " to reconnect (unreachable since ",
                                 TimeOfDay(u->since), ", ", u->why, ")"));
  }
  job->set_unreachable_reason(absl::StrJoin(parts, "; "));
}

void WorkerFaultManager::WorkerRegistered(const v1::Register& reg, const std::shared_ptr<WorkerChannel>& channel,
                                          Effects* fx) {
  // Reconcile what the worker runs with what the controller believes.
  std::set<std::pair<std::string, int>> reported;
  std::vector<StrayRank> strays;
  for (const auto& ra : reg.running()) {
    reported.insert({ra.job_id(), ra.attempt()});
    // Ended while the controller was away: nothing to cancel, and the ranks' final
    // states follow on this stream (the worker resends what was not acknowledged).
    if (ra.ended()) continue;
    auto it = jobs_->jobs().find(ra.job_id());
    const bool current = it != jobs_->jobs().end() && it->second.job.attempt() == ra.attempt();
    bool wanted = current && JobStateMachine::IsActive(it->second) && !it->second.tearing_down;
    if (!wanted) {
      v1::ControllerMessage cancel;
      cancel.mutable_cancel()->set_job_id(ra.job_id());
      cancel.mutable_cancel()->set_attempt(ra.attempt());
      cancel.mutable_cancel()->set_reason("the controller does not run this attempt");
      fx->Send(channel, std::move(cancel));
    }
    // A running rank no job counts on this worker (its attempt was given up while the
    // worker was away) keeps its slot busy until the worker reports it gone: placing a
    // new gang there now would be refused, the old ranks needing a moment to die.
    for (int rank : ra.ranks()) {
      const TrackedJob* rt = current ? &it->second : nullptr;
      const bool counted = rt != nullptr && HasRank(*rt, rank) && rt->ranks[rank] != RankPhase::kEnded &&
                           WorkerOf(*rt, rank) == reg.name();
      if (counted) continue;
      int gpu = -1;
      if (rt != nullptr && rank >= 0 && rank < rt->job.placement().ranks_size() &&
          rt->job.placement().ranks(rank).worker() == reg.name() && rt->job.placement().ranks(rank).has_gpu()) {
        gpu = rt->job.placement().ranks(rank).gpu();
      }
      strays.push_back(StrayRank{ra.job_id(), ra.attempt(), rank, gpu});
    }
  }
  workers_->SetStrays(reg.name(), strays);
  EndRanksOn(reg.name(), &reported, fx, [&](int rank) {
    return absl::StrCat("rank ", rank, " on worker ", reg.name(), " is gone (the worker restarted)");
  });
}

void WorkerFaultManager::WorkerLost(const std::string& name, const std::string& why, Effects* fx) {
  EndRanksOn(name, nullptr, fx,
             [&](int rank) { return absl::StrCat("worker ", name, " lost (", why, ") running rank ", rank); });
}

void WorkerFaultManager::EndRanksOn(const std::string& worker,
                                    const std::set<std::pair<std::string, int>>* still_running, Effects* fx,
                                    const std::function<std::string(int rank)>& cause) {
  for (auto& [id, rt] : jobs_->jobs()) {
    if (rt.live == 0 || (still_running != nullptr && still_running->count({id, rt.job.attempt()}))) continue;
    for (const auto& r : rt.job.placement().ranks()) {
      if (r.worker() != worker || !HasRank(rt, r.rank()) || rt.ranks[r.rank()] == RankPhase::kEnded) continue;
      jobs_->RankEnded(rt, r.rank(), fx);
      if (!JobStateMachine::IsTerminal(rt.job.state()) && !rt.tearing_down)
        jobs_->FailAttempt(rt, cause(r.rank()), worker, fx);
    }
  }
}

void WorkerFaultManager::GpusUnhealthy(const std::vector<GpuFault>& faults, Effects* fx) {
  for (const auto& f : faults) {
    const std::optional<GpuHolder> holder = workers_->GpuHeldBy(f.worker, f.index);
    if (!holder) continue;
    auto it = jobs_->jobs().find(holder->job_id);
    if (it == jobs_->jobs().end()) continue;
    TrackedJob& rt = it->second;
    if (rt.job.attempt() != holder->attempt || !JobStateMachine::IsActive(rt) || rt.tearing_down) continue;
    if (!HasRank(rt, holder->rank) || rt.ranks[holder->rank] == RankPhase::kEnded) continue;
    // Not blamed on the worker: one bad GPU is out of service, its other GPUs are fine.
    jobs_->FailAttempt(rt,
                       absl::StrCat("GPU ", f.index, " (", f.uuid, ") of worker ", f.worker,
                                    " unhealthy: ", f.reason.empty() ? std::string("no reason given") : f.reason,
                                    " (rank ", holder->rank, " ran on it)"),
                       "", fx);
  }
}

}  // namespace trainyard
