#include "server/state/job_state_machine.h"

#include <map>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/status_macros.h"
#include "common/events/rank_exit.h"
#include "common/proto_time.h"
#include "common/spec/rules.h"
#include "server/policy/gang_scheduler.h"
#include "server/policy/resize_policy.h"
#include "server/policy/restart_policy.h"
#include "spdlog/spdlog.h"

namespace trainyard {
namespace {

std::string StateName(v1::Job::State s) { return v1::Job::State_Name(s); }

}  // namespace

JobStateMachine::JobStateMachine(WorkerRegistry* workers, ControllerMetrics* metrics, Clock* clock,
                                 double max_events_per_s_per_rank)
    : workers_(workers), metrics_(metrics), clock_(clock), rate_(max_events_per_s_per_rank, 10.0) {}

v1::Job JobStateMachine::NewJob(v1::JobSpec normalised, const std::string& owner, absl::Time now, v1::Event* first) {
  v1::Job job;
  job.set_owner(owner);
  job.set_state(v1::Job::PENDING);
  job.set_pending_reason("waiting for the scheduler");
  // Admitted specs have dp·tp <= spec::kMaxWorldSize, so the product fits an int32.
  job.set_world_size(normalised.parallelism().dp() * normalised.parallelism().tp());
  *job.mutable_spec() = std::move(normalised);
  *job.mutable_create_time() = ToProtoTime(now);
  *first = JobStateEvent(v1::Job::PENDING, job.pending_reason(), 0, now);
  return job;
}

bool JobStateMachine::IsTerminal(v1::Job::State s) {
  return s == v1::Job::SUCCEEDED || s == v1::Job::FAILED || s == v1::Job::CANCELLED;
}

bool JobStateMachine::IsActive(const TrackedJob& rt) {
  return !IsTerminal(rt.job.state()) && rt.job.state() != v1::Job::PENDING;
}

int64_t JobStateMachine::Recover(v1::Job job, const std::vector<v1::Event>& events, Effects* fx) {
  const std::string id = job.id();
  TrackedJob& rt = jobs_[id];
  rt.job = std::move(job);
  rt.order = next_order_++;
  rt.queued_at = FromProtoTime(rt.job.create_time());
  metrics_->JobMoved(v1::Job::STATE_UNSPECIFIED, rt.job.state());
  // A recovered running job's progress clock starts now: its last step before the
  // controller stopped is not known here.
  metrics_->JobStateChanged(id, rt.job.state(), clock_->Now());
  if (IsTerminal(rt.job.state())) {
    fx->Settle(id);
    return rt.order;
  }
  spdlog::info("recovered job={} state={} attempt={}", id, StateName(rt.job.state()), rt.job.attempt());
  RestoreBackoff(rt, events);
  if (RestoreCheckpoint(rt, events)) fx->PutJob(rt.job);
  RestorePastPlacements(rt, events);
  if (!IsActive(rt)) return rt.order;
  // The attempt's ranks may still be running: every rank holds its slot until its
  // stored RankState events (replayed below) or its worker say otherwise, and the
  // placement's workers are waited for as after any disconnect.
  const int world = rt.job.world_size();
  rt.ranks.assign(world, RankPhase::kAssigned);
  rt.live = world;
  rt.tearing_down = rt.job.state() == v1::Job::RESTARTING;
  const auto& placement = rt.job.placement();
  if (placement.ranks_size() != world) {
    // Only a damaged row can get here; its out-of-range ranks are skipped everywhere.
    spdlog::error("job={} recovered with {} placed ranks for world size {}", id, placement.ranks_size(), world);
  }
  for (const auto& r : placement.ranks()) {
    workers_->ExpectReconnect(r.worker());
    workers_->Reserve(r.worker());
    if (r.has_gpu()) workers_->HoldGpu(r.worker(), r.gpu(), GpuHolder{id, rt.job.attempt(), r.rank()});
  }
  if (placement.ranks_size() > 0) {
    workers_->HoldPort(placement.ranks(0).worker(), placement.master_port());
  }
  rt.attempt_started = clock_->Now();  // not stored: the limit counts from recovery
  for (const auto& e : events) {
    if (e.attempt() != rt.job.attempt()) continue;
    if (e.has_rank_state()) ApplyRankState(rt, e, fx);
    if (e.has_stall()) ApplyStall(rt, e, fx);
    if (e.has_step_metrics()) NoteStep(rt, e.step_metrics());
  }
  return rt.order;
}

int64_t JobStateMachine::Add(v1::Job job) {
  const std::string id = job.id();
  TrackedJob& rt = jobs_[id];
  rt.job = std::move(job);
  rt.order = next_order_++;
  rt.queued_at = clock_->Now();
  metrics_->JobSubmitted();
  metrics_->JobEntered(v1::Job::PENDING);
  metrics_->JobMoved(v1::Job::STATE_UNSPECIFIED, v1::Job::PENDING);
  spdlog::info("job={} submitted name={} world_size={} owner={}", id, rt.job.spec().job().name(), rt.job.world_size(),
               rt.job.owner());
  return rt.order;
}

bool JobStateMachine::Closed(const std::string& id) const {
  auto it = jobs_.find(id);
  return it != jobs_.end() && IsTerminal(it->second.job.state()) && it->second.live == 0;
}

TrackedJob* JobStateMachine::Find(const std::string& id) {
  auto it = jobs_.find(id);
  return it == jobs_.end() ? nullptr : &it->second;
}

const TrackedJob* JobStateMachine::Find(const std::string& id) const {
  auto it = jobs_.find(id);
  return it == jobs_.end() ? nullptr : &it->second;
}

void JobStateMachine::MarkCompacted(const std::string& id, const v1::Compaction& compaction) {
  if (TrackedJob* rt = Find(id)) *rt->job.mutable_compacted() = compaction;
}

absl::Status JobStateMachine::Cancel(const std::string& id, const std::string& reason, Effects* fx) {
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return absl::NotFoundError(absl::StrCat("job ", id, " not found"));
  TrackedJob& rt = it->second;
  if (IsTerminal(rt.job.state())) {
    return absl::FailedPreconditionError(absl::StrCat("job ", id, " already ended ", StateName(rt.job.state())));
  }
  std::string why = reason.empty() ? "cancelled by user" : absl::StrCat("cancelled: ", reason);
  if (IsActive(rt)) {
    rt.tearing_down = true;
    SendCancel(rt, why, fx);
  }
  SetState(rt, v1::Job::CANCELLED, why, fx);
  return absl::OkStatus();
}

absl::Status JobStateMachine::Resize(const std::string& id, int dp, Effects* fx) {
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return absl::NotFoundError(absl::StrCat("job ", id, " not found"));
  TrackedJob& rt = it->second;
  const v1::JobSpec& spec = rt.job.spec();
  const bool live = (rt.job.state() == v1::Job::SCHEDULED || rt.job.state() == v1::Job::RUNNING) && !rt.tearing_down;
  const int current = live ? rt.job.world_size() / std::max(1, spec.parallelism().tp())
                           : rt.resize_dp.value_or(spec.parallelism().dp());
  TY_ASSIGN_OR_RETURN(const ResizePlan plan, ResizePolicy::Plan(rt.job, live, current, dp));
  if (plan.no_op) return absl::OkStatus();
  const std::string why = ResizePolicy::Reason(rt.job, live, plan.from_dp, dp);
  rt.resize_dp = dp;
  if (live) {
    ++rt.resizes;
    RestartWithoutFailure(rt, ResizePolicy::CancelReason(dp), why, fx);
  } else {  // only the restart to come changes; its event lets Recover read it back
    SetState(rt, rt.job.state(), why, fx);
  }
  return absl::OkStatus();
}

std::optional<std::vector<std::string>> JobStateMachine::AttemptWorkers(const std::string& id, int attempt) const {
  auto it = jobs_.find(id);
  if (it == jobs_.end() || attempt <= 0 || attempt > it->second.job.attempt()) return std::nullopt;
  const TrackedJob& rt = it->second;
  if (attempt == rt.job.attempt()) {
    std::vector<std::string> out;
    for (const auto& r : rt.job.placement().ranks()) out.push_back(r.worker());
    return out;
  }
  auto past = rt.past_placements.find(attempt);
  if (past == rt.past_placements.end()) return std::nullopt;
  return past->second;
}

std::vector<EventRefusal> JobStateMachine::Screen(const std::string& worker, const std::string& job_id,
                                                  std::vector<v1::Event>* events) {
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return {};
  std::vector<EventRefusal> refused = ScreenEvents(it->second.job, worker, events);
  const int world = std::max(1, it->second.job.world_size());
  if (int n = rate_.Admit(job_id, world, clock_->Now(), events); n > 0) {
    const std::string why = absl::StrCat("over the job's cap of ", rate_.per_second(),
                                         " log and compile events a second per rank (", world, " ranks)");
    refused.insert(refused.end(), n, EventRefusal{kDropRateLimited, why});
  }
  return refused;
}

void JobStateMachine::ApplyEvents(const std::string& job_id, const std::vector<v1::Event>& committed, Effects* fx) {
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return;
  TrackedJob& rt = it->second;
  for (const auto& e : committed) {
    if (e.attempt() != rt.job.attempt()) continue;
    if (e.has_rank_state()) ApplyRankState(rt, e, fx);
    if (e.has_stall()) ApplyStall(rt, e, fx);
    if (e.has_checkpoint() && RecordCheckpoint(rt, e)) {
      fx->PutJob(rt.job);
      spdlog::info("job={} attempt={} checkpoint step={} path={}{}", job_id, e.attempt(), e.checkpoint().step(),
                   e.checkpoint().path(), e.checkpoint().requested() ? " (requested)" : "");
    }
    if (e.has_checkpoint()) {
      for (const auto& listener : checkpoint_listeners_) listener(rt, e, fx);
    }
    if (e.has_step_metrics()) NoteStep(rt, e.step_metrics());
  }
}

void JobStateMachine::ApplyStall(TrackedJob& rt, const v1::Event& event, Effects* fx) {
  if (IsTerminal(rt.job.state()) || rt.tearing_down) return;
  // Blamed on the lagging rank's worker, else the reporter's.
  std::string blamed = WorkerOf(rt, event.stall().lagging_rank());
  FailAttempt(rt, StallCause(event), blamed.empty() ? WorkerOf(rt, event.rank()) : blamed, fx);
}

void JobStateMachine::EnforceTimeLimits(Effects* fx) {
  const absl::Time now = clock_->Now();
  for (auto& [id, rt] : jobs_) {
    const int limit = rt.job.spec().job().time_limit_s();
    if (limit <= 0 || !IsActive(rt) || rt.tearing_down) continue;
    if (now - rt.attempt_started < absl::Seconds(limit)) continue;
    const std::string why = absl::StrCat("time limit of ", limit, " s reached (job.time_limit_s)");
    rt.job.add_failure_causes(RestartPolicy::TrimCause(why));
    rt.tearing_down = true;
    SendCancel(rt, why, fx);
    SetState(rt, v1::Job::FAILED, why, fx);
  }
}

void JobStateMachine::FillEstimate(const std::string& id, v1::Job* job) const {
  auto it = jobs_.find(id);
  if (it == jobs_.end() || it->second.job.state() != v1::Job::PENDING) return;
  if (it->second.estimated_start) *job->mutable_estimated_start_time() = ToProtoTime(*it->second.estimated_start);
  for (const auto& w : it->second.reserved_workers) job->add_reserved_workers(w);
}

// ---- Transitions ----

void JobStateMachine::SetState(TrackedJob& rt, v1::Job::State state, const std::string& reason, Effects* fx) {
  const absl::Time now = clock_->Now();
  v1::Job& job = rt.job;
  metrics_->JobMoved(job.state(), state);
  if (state == v1::Job::PENDING && job.state() != v1::Job::PENDING) rt.queued_at = now;
  job.set_state(state);
  job.set_pending_reason(state == v1::Job::PENDING ? reason : "");
  if (state == v1::Job::RUNNING && !job.has_start_time()) {
    *job.mutable_start_time() = ToProtoTime(now);
  }
  if (state == v1::Job::FAILED || state == v1::Job::CANCELLED) job.set_failure_reason(reason);
  if (IsTerminal(state)) *job.mutable_end_time() = ToProtoTime(now);
  fx->PutJob(job);
  metrics_->JobEntered(state);
  metrics_->JobStateChanged(job.id(), state, now);
  spdlog::info("job={} attempt={} state={} {}", job.id(), job.attempt(), StateName(state), reason);
  fx->AppendEvent(job.id(), JobStateEvent(state, reason, job.attempt(), now));
  if (IsTerminal(state)) {
    metrics_->JobEnded(job.id(), now);
    if (rt.live == 0) fx->Settle(job.id());
    for (const auto& listener : ended_listeners_) listener(rt, fx);
  }
}

void JobStateMachine::ApplyRankState(TrackedJob& rt, const v1::Event& event, Effects* fx) {
  const int r = event.rank();
  if (r < 0 || r >= static_cast<int>(rt.ranks.size())) return;
  const auto& rs = event.rank_state();
  const std::string where = absl::StrCat("rank ", r, " on worker ", rs.worker());
  switch (rs.state()) {
    case v1::RankState::RUNNING:
      if (rt.ranks[r] == RankPhase::kAssigned) {
        rt.ranks[r] = RankPhase::kRunning;
        ++rt.running;
      }
      if (rt.running == static_cast<int>(rt.ranks.size()) && rt.job.state() == v1::Job::SCHEDULED && !rt.tearing_down) {
        SetState(rt, v1::Job::RUNNING, "all ranks running", fx);
      }
      break;
    case v1::RankState::EXITED:
      if (rt.ranks[r] == RankPhase::kEnded) break;
      // Judged before the slot is released: ranks that all finished during a teardown (a
      // resize or stall raced the last step) succeeded, without passing through PENDING.
      ++rt.exited_ok;
      if (rt.exited_ok == static_cast<int>(rt.ranks.size()) && !IsTerminal(rt.job.state())) {
        SetState(rt, v1::Job::SUCCEEDED, "all ranks exited 0", fx);
      }
      RankEnded(rt, r, fx);
      break;
    case v1::RankState::FAILED:
    case v1::RankState::KILLED: {
      if (rt.ranks[r] == RankPhase::kEnded) break;
      RankEnded(rt, r, fx);
      if (rs.state() == v1::RankState::FAILED && rs.exit_code() == kRankExitRefused) {
        AssignRefused(rt, r, rs, fx);
        break;
      }
      if (!IsTerminal(rt.job.state()) && !rt.tearing_down) {
        const char* what = rs.state() == v1::RankState::FAILED ? " failed" : " was killed";
        // Bad job inputs fail the same on any worker: no restart, no worker blamed.
        const bool permanent = rs.state() == v1::RankState::FAILED && rs.exit_code() == kRankExitInputError;
        const auto [blamed, note] = BlameRankFailure(rt, r);  // an unreachable worker of the gang, if any
        FailAttempt(rt, absl::StrCat(where, what, note, ": ", rs.message()), permanent ? std::string() : blamed, fx,
                    permanent);
      }
      break;
    }
    default:
      break;
  }
}

void JobStateMachine::AssignRefused(TrackedJob& rt, int rank, const v1::RankState& rs, Effects* fx) {
  const std::string worker = WorkerOf(rt, rank);
  spdlog::warn("job={} attempt={}: worker {} refused rank {}: {}", rt.job.id(), rt.job.attempt(), worker, rank,
               rs.message());
  // The worker runs ranks this controller does not count: it takes no new ones until it
  // says how many slots it has free, or the next placement would be refused the same way.
  workers_->AssignRefused(worker);
  if (IsTerminal(rt.job.state()) || rt.tearing_down) return;
  ++rt.refusals;  // no restart used, and no worker blamed: nothing failed but our count
  const std::string why = RefusalReason(worker, rank, rt.job.attempt(), rs.message());
  RestartWithoutFailure(rt, why, why, fx);
}

void JobStateMachine::RankEnded(TrackedJob& rt, int rank, Effects* fx) {
  if (rank < 0 || rank >= static_cast<int>(rt.ranks.size())) return;
  if (rt.ranks[rank] == RankPhase::kEnded) return;
  rt.ranks[rank] = RankPhase::kEnded;
  const auto& placement = rt.job.placement();
  if (rank < placement.ranks_size()) {
    const auto& pr = placement.ranks(rank);
    workers_->Release(pr.worker());
    if (pr.has_gpu()) workers_->ReleaseGpu(pr.worker(), pr.gpu(), rt.job.id());
  }
  if (--rt.live > 0) return;
  if (placement.ranks_size() > 0) {
    workers_->ReleasePort(placement.ranks(0).worker(), placement.master_port());
  }
  if (IsTerminal(rt.job.state())) {
    fx->Settle(rt.job.id());
  } else if (rt.job.state() == v1::Job::RESTARTING) {
    SetState(rt, v1::Job::PENDING, RestartPendingReason(rt, clock_->Now()), fx);
  }
}

void JobStateMachine::FailAttempt(TrackedJob& rt, const std::string& cause, const std::string& worker, Effects* fx,
                                  bool permanent) {
  rt.tearing_down = true;
  SendCancel(rt, cause, fx);
  if (!worker.empty()) ++rt.failures_on[worker];
  std::vector<std::string> causes(rt.job.failure_causes().begin(), rt.job.failure_causes().end());
  RestartPolicy::AppendCause(cause, &causes);
  rt.job.mutable_failure_causes()->Assign(causes.begin(), causes.end());
  const RestartDecision d = RestartPolicy::Decide(rt.job.spec().restart(), RestartsUsed(rt), causes, permanent);
  if (d.restart) {
    const absl::Time now = clock_->Now();
    metrics_->JobRestarted(rt.job.id());
    rt.not_before = now + d.backoff;
    SetState(rt, v1::Job::RESTARTING, d.reason, fx);
    if (rt.live == 0) SetState(rt, v1::Job::PENDING, RestartPendingReason(rt, now), fx);
  } else {
    SetState(rt, v1::Job::FAILED, d.reason, fx);
  }
}

void JobStateMachine::RestartWithoutFailure(TrackedJob& rt, const std::string& cancel_reason, const std::string& why,
                                            Effects* fx) {
  rt.tearing_down = true;
  rt.not_before = clock_->Now();  // no backoff: nothing failed
  SendCancel(rt, cancel_reason, fx);
  SetState(rt, v1::Job::RESTARTING, why, fx);
  if (rt.live == 0) SetState(rt, v1::Job::PENDING, RestartPendingReason(rt, clock_->Now()), fx);
}

void JobStateMachine::SendCancel(TrackedJob& rt, const std::string& reason, Effects* fx) {
  std::set<std::string> targets;
  for (const auto& r : rt.job.placement().ranks()) {
    const int rank = r.rank();
    if (rank >= 0 && rank < static_cast<int>(rt.ranks.size()) && rt.ranks[rank] != RankPhase::kEnded) {
      targets.insert(r.worker());
    }
  }
  for (const auto& name : targets) {
    v1::ControllerMessage msg;
    msg.mutable_cancel()->set_job_id(rt.job.id());
    msg.mutable_cancel()->set_attempt(rt.job.attempt());
    msg.mutable_cancel()->set_reason(reason);
    fx->Send(workers_->Channel(name), std::move(msg));
  }
}

std::pair<std::string, std::string> JobStateMachine::BlameRankFailure(const TrackedJob& rt, int rank) const {
  const std::string own = WorkerOf(rt, rank);
  for (const auto& r : rt.job.placement().ranks()) {
    if (r.worker() == own || !HasRank(rt, r.rank()) || rt.ranks[r.rank()] == RankPhase::kEnded) continue;
    if (const std::optional<UnreachableWorker> u = workers_->Unreachable(r.worker())) {
      return {u->name, absl::StrCat(" (worker ", u->name, " of the attempt unreachable: ", u->why, ")")};
    }
  }
  return {own, ""};
}

void JobStateMachine::StartAttempt(TrackedJob& rt, const GangDecision& decision, Effects* fx) {
  v1::Job& job = rt.job;
  const std::vector<std::string>& rank_workers = decision.rank_workers;
  const int world = static_cast<int>(rank_workers.size());
  const std::string note = PlacementNote(rt, decision, clock_->Now());
  rt.resize_dp.reset();  // a resize holds for one placement; a failure restart tries the full dp
  rt.evicted_reason.clear();
  rt.preempting.clear();
  rt.eviction.reset();
  rt.queue_position = 0;
  metrics_->JobPlaced(clock_->Now() - rt.queued_at);
  rt.attempt_started = clock_->Now();
  rt.last_step = 0;
  rt.step_seconds = 0;
  if (job.attempt() > 0) {
    std::vector<std::string>& past = rt.past_placements[job.attempt()];
    for (const auto& r : job.placement().ranks()) past.push_back(r.worker());  // rank i at index i
    while (rt.past_placements.size() > kMaxPastPlacements) rt.past_placements.erase(rt.past_placements.begin());
  }
  job.set_attempt(job.attempt() + 1);
  job.set_world_size(world);  // the spec's dp·tp, or the elastic layout's
  job.clear_placement();
  std::map<std::string, std::vector<int>> by_worker;
  for (int r = 0; r < world; ++r) {
    auto* pr = job.mutable_placement()->add_ranks();
    pr->set_rank(r);
    pr->set_worker(rank_workers[r]);
    by_worker[rank_workers[r]].push_back(r);
    workers_->Reserve(rank_workers[r]);
    const int gpu = r < static_cast<int>(decision.rank_gpus.size()) ? decision.rank_gpus[r] : -1;
    if (gpu >= 0) {
      pr->set_gpu(gpu);
      pr->set_gpu_uuid(workers_->GpuUuid(rank_workers[r], gpu));
      workers_->HoldGpu(rank_workers[r], gpu, GpuHolder{job.id(), job.attempt(), r});
    }
  }
  for (const auto& [name, ranks] : by_worker) {
    std::vector<std::string> env = workers_->NcclEnv(name);
    if (env.empty()) continue;
    auto* we = job.mutable_placement()->add_worker_env();
    we->set_worker(name);
    for (auto& e : env) we->add_nccl_env(std::move(e));
  }
  job.mutable_placement()->set_master_addr(workers_->Address(rank_workers[0]));
  job.mutable_placement()->set_master_port(workers_->AllocatePort(rank_workers[0]));
  rt.ranks.assign(world, RankPhase::kAssigned);
  rt.live = world;
  rt.running = 0;
  rt.exited_ok = 0;
  rt.tearing_down = false;

  std::vector<std::string> parts;
  for (const auto& [name, ranks] : by_worker) {
    parts.push_back(absl::StrCat(name, "×", ranks.size()));
  }
  SetState(rt, v1::Job::SCHEDULED, absl::StrCat("placed on ", absl::StrJoin(parts, ", "), note), fx);
  // Recorded after the SCHEDULED writes, so they go out once those are committed.
  for (const auto& [name, ranks] : by_worker) fx->Send(workers_->Channel(name), AssignFor(rt, ranks));
}

}  // namespace trainyard
