#include "server/state/eviction_manager.h"

#include <algorithm>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/proto_time.h"
#include "server/policy/preemption_policy.h"
#include "spdlog/spdlog.h"

namespace trainyard {
namespace {

constexpr int kKeptPreemptTimes = 16;

std::string UtcTimeOfDay(absl::Time t) { return absl::FormatTime("%H:%M:%SZ", t, absl::UTCTimeZone()); }

}  // namespace

EvictionManager::EvictionManager(JobStateMachine* jobs, WorkerRegistry* workers, ControllerMetrics* metrics,
                                 Clock* clock, SharingOptions options)
    : jobs_(jobs), workers_(workers), metrics_(metrics), clock_(clock), options_(options) {
  jobs_->AddCheckpointListener(
      [this](TrackedJob& rt, const v1::Event& event, Effects* fx) { RequestedCheckpointSaved(rt, event, fx); });
}

absl::StatusOr<CheckpointWant> EvictionManager::RequestCheckpoint(const std::string& id, Effects* fx) {
  auto it = jobs_->jobs().find(id);
  if (it == jobs_->jobs().end()) return absl::NotFoundError(absl::StrCat("job ", id, " not found"));
  TrackedJob& rt = it->second;
  const v1::Job::State s = rt.job.state();
  if (JobStateMachine::IsTerminal(s)) {
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
  return CheckpointWant{rt.job.attempt(), SendCheckpointRequest(rt, fx)};
}

bool EvictionManager::CheckpointStillPossible(const std::string& id, const CheckpointWant& want,
                                              std::string* why) const {
  auto it = jobs_->jobs().find(id);
  if (it == jobs_->jobs().end()) return false;
  const TrackedJob& rt = it->second;
  if (rt.job.attempt() == want.attempt && JobStateMachine::IsActive(rt) && !rt.tearing_down) return true;
  *why = absl::StrCat("job ", id, "'s attempt ", want.attempt, " ended (the job is ",
                      v1::Job::State_Name(rt.job.state()), ") before its checkpoint was complete");
  return false;
}

int64_t EvictionManager::SendCheckpointRequest(TrackedJob& rt, Effects* fx) {
  // A request already sent is sent again: the ranks save once at their next step either
  // way, and the new one's step floor is the newer.
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
  spdlog::info("job={} attempt={} checkpoint requested (after step {})", rt.job.id(), rt.job.attempt(), rt.last_step);
  return rt.last_step + 1;
}

void EvictionManager::RequestedCheckpointSaved(TrackedJob& rt, const v1::Event& event, Effects* fx) {
  const v1::CheckpointSaved& ck = event.checkpoint();
  if (event.rank() != 0 || !ck.requested() || event.attempt() != rt.job.attempt()) return;
  if (!rt.eviction || ck.step() < rt.eviction->min_step || rt.tearing_down) return;
  if (!EvictionStillWanted(rt)) return;
  const Eviction e = *rt.eviction;
  StopEvicted(rt, e.reason, e.preemption, absl::StrCat(" after its checkpoint at step ", ck.step()), fx);
}

bool EvictionManager::EvictionStillWanted(const TrackedJob& rt) const {
  if (!rt.eviction->preemption) return true;
  auto by = jobs_->jobs().find(rt.eviction->by);
  if (by == jobs_->jobs().end() || by->second.job.state() != v1::Job::PENDING) return false;
  for (const Victim& v : by->second.preempting) {
    if (v.id == rt.job.id() && v.attempt == rt.job.attempt()) return true;
  }
  return false;
}

void EvictionManager::Evict(TrackedJob& rt, const std::string& reason, const std::string& by, Effects* fx) {
  if (!JobStateMachine::IsActive(rt) || rt.tearing_down || rt.eviction) return;
  const absl::Time now = clock_->Now();
  const bool preemption = !by.empty();
  if (rt.job.state() == v1::Job::RUNNING && !rt.job.spec().checkpoint().dir().empty()) {
    const int64_t min_step = SendCheckpointRequest(rt, fx);
    rt.eviction = Eviction{reason, now + options_.preemption_grace, min_step, preemption, by};
    const std::string message = absl::StrCat(reason, ": saving a checkpoint before stopping (grace until ",
                                             UtcTimeOfDay(rt.eviction->deadline), ")");
    spdlog::info("job={} attempt={} {}", rt.job.id(), rt.job.attempt(), message);
    fx->AppendEvent(rt.job.id(), ControllerLog("info", message, rt.job.attempt(), now));
    return;
  }
  const std::string note = rt.job.spec().checkpoint().dir().empty()
                               ? " (no checkpoint.dir: it starts over)"
                               : absl::StrCat(" before it ran a step (", v1::Job::State_Name(rt.job.state()), ")");
  StopEvicted(rt, reason, preemption, note, fx);
}

void EvictionManager::StopEvicted(TrackedJob& rt, const std::string& reason, bool preemption, const std::string& note,
                                  Effects* fx) {
  const absl::Time now = clock_->Now();
  rt.eviction.reset();
  rt.evicted_reason = reason;
  v1::Job& job = rt.job;
  job.set_preemptions(job.preemptions() + 1);  // before the RESTARTING row is written
  if (preemption) {
    *job.add_preempt_times() = ToProtoTime(now);
    while (job.preempt_times_size() > kKeptPreemptTimes)
      job.mutable_preempt_times()->erase(job.preempt_times().begin());
  }
  metrics_->sharing().Evicted(preemption);
  // The RESTARTING reason is the eviction alone (EvictionOf reads it back at recovery);
  // how it went is a log line of the job's.
  fx->AppendEvent(job.id(), ControllerLog("info", absl::StrCat(reason, ": stopping", note), job.attempt(), now));
  jobs_->RestartWithoutFailure(rt, reason, reason, fx);
}

void EvictionManager::EnforceEvictions(Effects* fx) {
  const absl::Time now = clock_->Now();
  for (auto& [id, rt] : jobs_->jobs()) {
    if (!rt.eviction) continue;
    if (!JobStateMachine::IsActive(rt) || rt.tearing_down) {  // cancelled, failed or finished meanwhile
      rt.eviction.reset();
      continue;
    }
    if (!EvictionStillWanted(rt)) {
      spdlog::info("job={} attempt={} eviction called off ({}): {} no longer waits for it", id, rt.job.attempt(),
                   rt.eviction->reason, rt.eviction->by);
      fx->AppendEvent(id, ControllerLog("info",
                                        absl::StrCat(rt.eviction->reason, ": called off, ", rt.eviction->by,
                                                     " no longer waits for it"),
                                        rt.job.attempt(), now));
      rt.eviction.reset();
      continue;
    }
    if (now < rt.eviction->deadline) continue;
    const Eviction e = *rt.eviction;
    const int64_t from = rt.job.last_checkpoint().step();
    StopEvicted(rt, e.reason, e.preemption,
                absl::StrCat(" without a new checkpoint: none was complete within the ",
                             absl::ToInt64Seconds(options_.preemption_grace), " s grace; it resumes from ",
                             from > 0 ? absl::StrCat("step ", from) : std::string("the start")),
                fx);
  }
}

std::vector<std::string> EvictionManager::Drain(const std::string& worker, const std::string& reason, Effects* fx) {
  std::vector<std::string> moved;
  const std::string why = absl::StrCat("drained from ", worker, reason.empty() ? "" : ": ", reason);
  for (auto& [id, rt] : jobs_->jobs()) {
    if (!JobStateMachine::IsActive(rt) || rt.tearing_down) continue;
    bool here = false;
    for (const auto& r : rt.job.placement().ranks()) {
      if (r.worker() == worker && HasRank(rt, r.rank()) && rt.ranks[r.rank()] != RankPhase::kEnded) here = true;
    }
    if (!here) continue;
    moved.push_back(id);
    if (rt.eviction) {
      // Already being preempted: that eviction moves it, whatever its preemptor does now.
      rt.eviction->preemption = false;
      rt.eviction->by.clear();
      continue;
    }
    Evict(rt, why, /*by=*/"", fx);
  }
  return moved;
}

int EvictionManager::PreemptionsInLastHour(const TrackedJob& rt) const {
  const absl::Time since = clock_->Now() - absl::Hours(1);
  int n = 0;
  for (const auto& t : rt.job.preempt_times()) {
    if (FromProtoTime(t) > since) ++n;
  }
  return n;
}

void EvictionManager::MaybePreempt(const std::vector<QueuedJob>& queue, const std::vector<GangDecision>& decisions,
                                   const std::set<std::string>& placed_now, Effects* fx) {
  // One preemption at a time: while a preemptor waits for its victims' attempts to
  // stop, no other victims are taken (what they give back is not counted yet).
  bool waiting = false;
  for (auto& [id, rt] : jobs_->jobs()) {
    if (rt.preempting.empty()) continue;
    bool live = false;
    for (const Victim& v : rt.preempting) {
      auto vt = jobs_->jobs().find(v.id);
      if (vt != jobs_->jobs().end() && vt->second.job.attempt() == v.attempt && vt->second.live > 0) live = true;
    }
    if (live && rt.job.state() == v1::Job::PENDING) {
      waiting = true;
    } else {
      rt.preempting.clear();  // its victims are gone; it may preempt again if still unplaced
    }
  }
  if (waiting) return;
  // Only the queue's head preempts: a later job could not start on what its victims give
  // back ahead of the head, whose reservation covers them (EASY backfill).
  size_t head = 0;
  while (head < decisions.size() && decisions[head].placed) ++head;
  if (head >= decisions.size() || head >= queue.size()) return;
  TrackedJob& rt = jobs_->jobs().at(queue[head].id);
  const int priority = rt.job.spec().job().priority();
  const absl::Time now = clock_->Now();
  std::vector<PreemptionCandidate> candidates, stopping;
  for (const auto& [id, other] : jobs_->jobs()) {
    if (!JobStateMachine::IsActive(other) || other.live == 0 || placed_now.count(id)) continue;
    const RunningJob running = RunningJobOf(other, now);
    PreemptionCandidate c;
    c.id = id;
    c.rank_workers = running.rank_workers;
    c.rank_gpus = running.rank_gpus;
    if (other.tearing_down || other.eviction) {  // on its way out: its slots count as free
      stopping.push_back(std::move(c));
      continue;
    }
    if (other.job.spec().job().priority() >= priority) continue;
    c.priority = other.job.spec().job().priority();
    // Specs stored before job.preemptible existed have it unset: preemptible.
    c.preemptible = !other.job.spec().job().has_preemptible() || other.job.spec().job().preemptible();
    c.preemptions_last_hour = PreemptionsInLastHour(other);
    c.attempt_started = other.attempt_started;
    candidates.push_back(std::move(c));
  }
  if (candidates.empty()) return;
  std::vector<const PreemptionCandidate*> ending;
  for (const auto& c : stopping) ending.push_back(&c);
  const std::vector<WorkerSnapshot> free = PreemptionPolicy::Freed(workers_->ConnectedFree(), ending);
  std::optional<PreemptionPlan> plan =
      PreemptionPolicy::Plan(queue[head], free, candidates, options_.max_preemptions_per_hour);
  if (!plan || plan->victims.empty()) return;
  const std::string reason = absl::StrCat("preempted by ", rt.job.id(), " (priority ", priority, ")");
  absl::Time until = now;
  rt.preempting.clear();
  for (const std::string& v : plan->victims) {
    TrackedJob& victim = jobs_->jobs().at(v);
    rt.preempting.push_back(Victim{v, victim.job.attempt()});
  }
  for (const std::string& v : plan->victims) {
    TrackedJob& victim = jobs_->jobs().at(v);
    Evict(victim, reason, rt.job.id(), fx);
    if (victim.eviction) until = std::max(until, victim.eviction->deadline);
  }
  rt.preempting_until = until;
  spdlog::info("job={} preempts {}", rt.job.id(), absl::StrJoin(plan->victims, ", "));
  if (std::string why = PendingReasonOf(rt, decisions[head], now); why != rt.job.pending_reason()) {
    jobs_->SetState(rt, v1::Job::PENDING, why, fx);
  }
}

}  // namespace trainyard
