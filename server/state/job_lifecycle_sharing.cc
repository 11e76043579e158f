// JobLifecycle: sharing the fleet. Checkpoints on request, evictions (a preemption
// or a drain: checkpoint first, then stop, resume later from that checkpoint) and the
// choice of preemption victims (PreemptionPolicy) after each scheduling pass.
#include <algorithm>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/proto_time.h"
#include "server/policy/preemption_policy.h"
#include "server/state/job_lifecycle.h"
#include "spdlog/spdlog.h"

namespace trainyard {
namespace {

constexpr int kKeptPreemptTimes = 16;

std::string TimeOfDay(absl::Time t) { return absl::FormatTime("%H:%M:%SZ", t, absl::UTCTimeZone()); }

v1::Event ControllerLog(const std::string& level, const std::string& message, int attempt, absl::Time now) {
  v1::Event event;
  event.set_rank(-1);
  event.set_attempt(attempt);
  event.mutable_log()->set_level(level);
  event.mutable_log()->set_message(message);
  *event.mutable_time() = ToProtoTime(now);
  return event;
}

}  // namespace

absl::StatusOr<CheckpointWant> JobLifecycle::RequestCheckpoint(const std::string& id, Effects* fx) {
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return absl::NotFoundError(absl::StrCat("job ", id, " not found"));
  TrackedJob& rt = it->second;
  const v1::Job::State s = rt.job.state();
  if (IsTerminal(s)) {
    return absl::FailedPreconditionError(absl::StrCat("job ", id, " already ended ", v1::Job::State_Name(s)));
  }
  if (rt.job.spec().checkpoint().dir().empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", id, " sets no checkpoint.dir, so its ranks have nowhere to write a checkpoint"));
  }
  if (s != v1::Job::RUNNING || rt.tearing_down) {
    return absl::FailedPreconditionError(absl::StrCat("job ", id, " is ", v1::Job::State_Name(s),
                                                      rt.tearing_down ? " and stopping" : "",
                                                      ": only a running attempt can checkpoint"));
  }
  SendCheckpointRequest(rt, fx);
  return CheckpointWant{rt.job.attempt(), rt.checkpoint_request_min_step};
}

bool JobLifecycle::CheckpointStillPossible(const std::string& id, const CheckpointWant& want,
                                           std::string* why) const {
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return false;
  const TrackedJob& rt = it->second;
  if (rt.job.attempt() == want.attempt && IsActive(rt) && !rt.tearing_down) return true;
  *why = absl::StrCat("job ", id, "'s attempt ", want.attempt, " ended (the job is ",
                      v1::Job::State_Name(rt.job.state()), ") before its checkpoint was complete");
  return false;
}

void JobLifecycle::SendCheckpointRequest(TrackedJob& rt, Effects* fx) {
  // A request already sent is sent again: the ranks save once at their next step either
  // way, and the new one's step floor is the newer.
  rt.checkpoint_request_attempt = rt.job.attempt();
  rt.checkpoint_request_min_step = rt.last_step + 1;
  std::set<std::string> targets;
  for (const auto& r : rt.job.placement().ranks()) {
    if (HasRank(rt, r.rank()) && rt.ranks[r.rank()] != RankPhase::kEnded) targets.insert(r.worker());
  }
  for (const auto& name : targets) {
    v1::ControllerMessage msg;
    msg.mutable_checkpoint()->set_job_id(rt.job.id());
    msg.mutable_checkpoint()->set_attempt(rt.job.attempt());
    fx->Send(workers_->Channel(name), std::move(msg));
  }
  spdlog::info("job={} attempt={} checkpoint requested (after step {})", rt.job.id(), rt.job.attempt(),
               rt.last_step);
}

void JobLifecycle::RequestedCheckpointSaved(TrackedJob& rt, const v1::Event& event, Effects* fx) {
  const v1::CheckpointSaved& ck = event.checkpoint();
  if (event.rank() != 0 || !ck.requested() || event.attempt() != rt.job.attempt()) return;
  if (rt.checkpoint_request_attempt == event.attempt() && ck.step() >= rt.checkpoint_request_min_step) {
    rt.checkpoint_request_attempt = 0;
  }
  if (rt.eviction && ck.step() >= rt.eviction->min_step && !rt.tearing_down) {
    const Eviction e = *rt.eviction;
    StopEvicted(rt, e.reason, e.preemption, absl::StrCat(" after its checkpoint at step ", ck.step()), fx);
  }
}

void JobLifecycle::Evict(TrackedJob& rt, const std::string& reason, bool preemption, Effects* fx) {
  if (!IsActive(rt) || rt.tearing_down || rt.eviction) return;
  const absl::Time now = clock_->Now();
  if (rt.job.state() == v1::Job::RUNNING && !rt.job.spec().checkpoint().dir().empty()) {
    rt.eviction = Eviction{reason, now + sharing_.preemption_grace, rt.last_step + 1, preemption};
    SendCheckpointRequest(rt, fx);
    rt.eviction->min_step = rt.checkpoint_request_min_step;
    const std::string message = absl::StrCat(reason, ": saving a checkpoint before stopping (grace until ",
                                             TimeOfDay(rt.eviction->deadline), ")");
    spdlog::info("job={} attempt={} {}", rt.job.id(), rt.job.attempt(), message);
    fx->AppendEvent(rt.job.id(), ControllerLog("info", message, rt.job.attempt(), now));
    return;
  }
  const std::string note = rt.job.spec().checkpoint().dir().empty()
                               ? " (no checkpoint.dir: it starts over)"
                               : absl::StrCat(" before it ran a step (", v1::Job::State_Name(rt.job.state()), ")");
  StopEvicted(rt, reason, preemption, note, fx);
}

void JobLifecycle::StopEvicted(TrackedJob& rt, const std::string& reason, bool preemption, const std::string& note,
                               Effects* fx) {
  const absl::Time now = clock_->Now();
  rt.eviction.reset();
  rt.checkpoint_request_attempt = 0;
  rt.tearing_down = true;
  rt.not_before = now;  // no backoff: nothing failed
  rt.evicted_reason = reason;
  v1::Job& job = rt.job;
  job.set_preemptions(job.preemptions() + 1);
  if (preemption) {
    *job.add_preempt_times() = ToProtoTime(now);
    while (job.preempt_times_size() > kKeptPreemptTimes) job.mutable_preempt_times()->erase(job.preempt_times().begin());
  }
  metrics_->sharing().Evicted(preemption);
  SendCancel(rt, reason, fx);
  // The RESTARTING reason is the eviction alone (EvictionOf reads it back at recovery);
  // how it went is a log line of the job's.
  fx->AppendEvent(job.id(), ControllerLog("info", absl::StrCat(reason, ": stopping", note), job.attempt(), now));
  SetState(rt, v1::Job::RESTARTING, reason, fx);
  if (rt.live == 0) SetState(rt, v1::Job::PENDING, RestartPendingReason(rt, now), fx);
}

void JobLifecycle::EnforceEvictions(Effects* fx) {
  const absl::Time now = clock_->Now();
  for (auto& [id, rt] : jobs_) {
    if (!rt.eviction) continue;
    if (!IsActive(rt) || rt.tearing_down) {  // cancelled, failed or finished meanwhile
      rt.eviction.reset();
      continue;
    }
    if (now < rt.eviction->deadline) continue;
    const Eviction e = *rt.eviction;
    const int64_t from = rt.job.last_checkpoint().step();
    StopEvicted(rt, e.reason, e.preemption,
                absl::StrCat(" without a new checkpoint: none was complete within the ",
                             absl::ToInt64Seconds(sharing_.preemption_grace), " s grace; it resumes from ",
                             from > 0 ? absl::StrCat("step ", from) : std::string("the start")),
                fx);
  }
}

absl::StatusOr<std::vector<std::string>> JobLifecycle::Drain(const std::string& worker, const std::string& reason,
                                                             Effects* fx) {
  std::vector<std::string> moved;
  const std::string why = absl::StrCat("drained from ", worker, reason.empty() ? "" : ": ", reason);
  for (auto& [id, rt] : jobs_) {
    if (!IsActive(rt) || rt.tearing_down) continue;
    bool here = false;
    for (const auto& r : rt.job.placement().ranks()) {
      if (r.worker() == worker && HasRank(rt, r.rank()) && rt.ranks[r.rank()] != RankPhase::kEnded) here = true;
    }
    if (!here) continue;
    moved.push_back(id);
    if (!rt.eviction) {
      Evict(rt, why, /*preemption=*/false, fx);
    } else {
      // Already being preempted: the drain only shortens nothing; its checkpoint moves it.
      spdlog::info("job={} drained from {} while already being evicted ({})", id, worker, rt.eviction->reason);
    }
  }
  return moved;
}

int JobLifecycle::PreemptionsInLastHour(const TrackedJob& rt) const {
  const absl::Time since = clock_->Now() - absl::Hours(1);
  int n = 0;
  for (const auto& t : rt.job.preempt_times()) {
    if (FromProtoTime(t) > since) ++n;
  }
  return n;
}

void JobLifecycle::MaybePreempt(const std::vector<QueuedJob>& queue, const std::vector<GangDecision>& decisions,
                                Effects* fx) {
  // One preemption at a time: while a preemptor waits for its victims, the slots they
  // give back are its (it is first in queue order), and no other victims are taken.
  bool waiting = false;
  for (auto& [id, rt] : jobs_) {
    if (rt.preempting.empty()) continue;
    bool live = false;
    for (const std::string& v : rt.preempting) {
      auto vt = jobs_.find(v);
      if (vt != jobs_.end() && vt->second.live > 0) live = true;
    }
    if (live && rt.job.state() == v1::Job::PENDING) {
      waiting = true;
    } else {
      rt.preempting.clear();  // its victims are gone; it may preempt again if still unplaced
    }
  }
  if (waiting) return;
  std::vector<PreemptionCandidate> candidates;
  for (const auto& [id, rt] : jobs_) {
    if (!IsActive(rt) || rt.tearing_down || rt.eviction || rt.live == 0) continue;
    PreemptionCandidate c;
    c.id = id;
    c.priority = rt.job.spec().job().priority();
    c.preemptible = rt.job.spec().job().preemptible();
    c.preemptions_last_hour = PreemptionsInLastHour(rt);
    c.attempt_started = rt.attempt_started;
    const RunningJob running = RunningJobOf(rt, clock_->Now());
    c.rank_workers = running.rank_workers;
    c.rank_gpus = running.rank_gpus;
    candidates.push_back(std::move(c));
  }
  if (candidates.empty()) return;
  const std::vector<WorkerSnapshot> free = workers_->ConnectedFree();
  for (size_t i = 0; i < decisions.size() && i < queue.size(); ++i) {
    if (decisions[i].placed) continue;
    TrackedJob& rt = jobs_.at(queue[i].id);
    const int priority = rt.job.spec().job().priority();
    std::optional<PreemptionPlan> plan =
        PreemptionPolicy::Plan(queue[i], free, candidates, sharing_.max_preemptions_per_hour);
    if (!plan || plan->victims.empty()) continue;
    const std::string reason = absl::StrCat("preempted by ", rt.job.id(), " (priority ", priority, ")");
    absl::Time until = clock_->Now();
    std::vector<std::string> named;
    for (const std::string& v : plan->victims) {
      TrackedJob& victim = jobs_.at(v);
      Evict(victim, reason, /*preemption=*/true, fx);
      if (victim.eviction) until = std::max(until, victim.eviction->deadline);
      named.push_back(v);
    }
    rt.preempting = plan->victims;
    rt.preempting_until = until;
    spdlog::info("job={} preempts {}", rt.job.id(), absl::StrJoin(named, ", "));
    if (std::string why = PendingReasonOf(rt, decisions[i], clock_->Now()); why != rt.job.pending_reason()) {
      SetState(rt, v1::Job::PENDING, why, fx);
    }
    return;
  }
}

}  // namespace trainyard
