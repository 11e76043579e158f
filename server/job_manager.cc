#include "server/job_manager.h"

#include <algorithm>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/spec_defaults.h"
#include "common/spec_validation.h"
#include "common/status_macros.h"
#include "spdlog/spdlog.h"

namespace trainyard {
namespace {

void SetTimestamp(google::protobuf::Timestamp* ts, absl::Time t) {
  int64_t nanos = absl::ToUnixNanos(t);
  ts->set_seconds(nanos / 1000000000);
  ts->set_nanos(static_cast<int32_t>(nanos % 1000000000));
}

std::string StateName(v1::Job::State s) { return v1::Job::State_Name(s); }

}  // namespace

JobManager::JobManager(JobStore* store, EventHub* hub, ControllerMetrics* metrics,
                       Clock* clock, JobManagerOptions options)
    : store_(store), hub_(hub), metrics_(metrics), clock_(clock), options_(options) {}

bool JobManager::IsTerminal(v1::Job::State s) {
  return s == v1::Job::SUCCEEDED || s == v1::Job::FAILED || s == v1::Job::CANCELLED;
}

bool JobManager::IsActive(const JobRuntime& rt) const {
  return !IsTerminal(rt.job.state()) && rt.job.state() != v1::Job::PENDING;
}

absl::Status JobManager::Recover() {
  TY_ASSIGN_OR_RETURN(auto jobs, store_->LoadJobs());
  absl::MutexLock lock(&mu_);
  const absl::Time now = clock_->Now();
  for (auto& job : jobs) {
    JobRuntime rt;
    rt.job = std::move(job);
    rt.order = next_order_++;
    const std::string id = rt.job.id();
    if (IsTerminal(rt.job.state())) {
      jobs_[id] = std::move(rt);
      hub_->MarkSettled(id);
      continue;
    }
    if (IsActive(rt)) {
      // The attempt's ranks may still be running: rebuild each rank's phase from the
      // stored RankState events, and wait for the placement's workers to reconnect as
      // after any disconnect (lost after the heartbeat timeout).
      const int world = rt.job.world_size();
      rt.ranks.assign(world, RankPhase::kAssigned);
      rt.live = world;
      TY_ASSIGN_OR_RETURN(auto events, store_->ReadEvents(id, 1, 1 << 30));
      for (const auto& e : events) {
        if (!e.has_rank_state() || e.attempt() != rt.job.attempt()) continue;
        if (e.rank() < 0 || e.rank() >= world) continue;
        RankPhase& phase = rt.ranks[e.rank()];
        switch (e.rank_state().state()) {
          case v1::RankState::RUNNING:
            if (phase == RankPhase::kAssigned) { phase = RankPhase::kRunning; ++rt.running; }
            break;
          case v1::RankState::EXITED:
          case v1::RankState::FAILED:
          case v1::RankState::KILLED:
            if (phase != RankPhase::kEnded) { phase = RankPhase::kEnded; --rt.live; }
            if (e.rank_state().state() == v1::RankState::EXITED) ++rt.exited_ok;
            break;
          default:
            break;
        }
      }
      for (const auto& r : rt.job.placement().ranks()) {
        auto& w = workers_[r.worker()];
        if (w.reg.name().empty()) {
          w.reg.set_name(r.worker());
          w.connected = false;
          w.last_seen = now;
        }
      }
    }
    spdlog::info("recovered job={} state={} attempt={}", id, StateName(rt.job.state()),
                 rt.job.attempt());
    jobs_[id] = std::move(rt);
  }
  ScheduleLocked();
  return absl::OkStatus();
}

absl::Status JobManager::Reject(absl::Status status) {
  metrics_->JobRejected();
  spdlog::info("rejected job: {}", std::string(status.message()));
  return status;
}

absl::Status JobManager::ValidateLocked(const v1::JobSpec& normalised) {
  if (auto s = ValidateJobSpec(normalised, TotalSlotsLocked()); !s.ok()) return Reject(s);
  if (auto s = CheckSupported(normalised); !s.ok()) return Reject(s);
  return absl::OkStatus();
}

absl::Status JobManager::Validate(v1::JobSpec* spec) {
  if (auto s = ApplyPresetAndDefaults(spec); !s.ok()) return Reject(s);
  absl::MutexLock lock(&mu_);
  return ValidateLocked(*spec);
}

absl::StatusOr<v1::Job> JobManager::Submit(v1::JobSpec spec, const std::string& owner) {
  if (auto s = ApplyPresetAndDefaults(&spec); !s.ok()) return Reject(s);
  absl::MutexLock lock(&mu_);
  TY_RETURN_IF_ERROR(ValidateLocked(spec));

  JobRuntime rt;
  rt.job.set_owner(owner);
  rt.job.set_state(v1::Job::PENDING);
  rt.job.set_pending_reason("waiting for the scheduler");
  rt.job.set_world_size(WorldSize(spec));
  *rt.job.mutable_spec() = std::move(spec);
  SetTimestamp(rt.job.mutable_create_time(), clock_->Now());
  TY_RETURN_IF_ERROR(store_->CreateJob(&rt.job));
  rt.order = next_order_++;
  const std::string id = rt.job.id();
  JobRuntime& ref = jobs_[id] = std::move(rt);
  metrics_->JobSubmitted();
  metrics_->JobEntered(v1::Job::PENDING);
  spdlog::info("job={} submitted name={} world_size={} owner={}", id,
               ref.job.spec().job().name(), ref.job.world_size(), owner);
  v1::Event event;
  event.mutable_job_state()->set_state(v1::Job::PENDING);
  event.mutable_job_state()->set_reason(ref.job.pending_reason());
  EmitLocked(ref, std::move(event));
  ScheduleLocked();
  v1::Job out = jobs_[id].job;
  out.set_last_seq(store_->LastSeq(id));
  return out;
}

absl::StatusOr<v1::Job> JobManager::Get(const std::string& id) {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return absl::NotFoundError(absl::StrCat("job ", id, " not found"));
  v1::Job out = it->second.job;
  out.set_last_seq(store_->LastSeq(id));
  return out;
}

std::vector<v1::Job> JobManager::List(const std::vector<v1::Job::State>& states, int limit) {
  absl::MutexLock lock(&mu_);
  std::vector<const JobRuntime*> rows;
  for (const auto& [id, rt] : jobs_) {
    if (!states.empty() &&
        std::find(states.begin(), states.end(), rt.job.state()) == states.end()) {
      continue;
    }
    rows.push_back(&rt);
  }
  // Newest first, as a person scanning the list wants.
  std::sort(rows.begin(), rows.end(),
            [](const JobRuntime* a, const JobRuntime* b) { return a->order > b->order; });
  if (limit <= 0) limit = 100;
  std::vector<v1::Job> out;
  for (const auto* rt : rows) {
    if (static_cast<int>(out.size()) >= limit) break;
    out.push_back(rt->job);
    out.back().set_last_seq(store_->LastSeq(rt->job.id()));
  }
  return out;
}

absl::StatusOr<v1::Job> JobManager::Cancel(const std::string& id, const std::string& reason) {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return absl::NotFoundError(absl::StrCat("job ", id, " not found"));
  JobRuntime& rt = it->second;
  if (IsTerminal(rt.job.state())) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", id, " already ended ", StateName(rt.job.state())));
  }
  std::string why = reason.empty() ? "cancelled by user" : absl::StrCat("cancelled: ", reason);
  if (IsActive(rt)) {
    rt.tearing_down = true;
    SendCancelLocked(rt, why);
  }
  TY_RETURN_IF_ERROR(SetStateLocked(rt, v1::Job::CANCELLED, why));
  ScheduleLocked();
  v1::Job out = rt.job;
  out.set_last_seq(store_->LastSeq(id));
  return out;
}

std::vector<v1::WorkerInfo> JobManager::Workers() {
  absl::MutexLock lock(&mu_);
  std::vector<v1::WorkerInfo> out;
  for (const auto& [name, w] : workers_) {
    v1::WorkerInfo info;
    info.set_name(name);
    info.set_slots(w.reg.slots());
    info.set_free_slots(FreeSlotsLocked(name));
    info.set_connected(w.connected);
    info.set_address(w.reg.address());
    out.push_back(std::move(info));
  }
  return out;
}

absl::Status JobManager::RegisterWorker(int64_t conn, const v1::Register& reg,
                                        std::shared_ptr<WorkerChannel> channel) {
  if (reg.name().empty()) return absl::InvalidArgumentError("register: name is empty");
  if (reg.slots() <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("register: slots must be positive, got ", reg.slots()));
  }
  if (reg.rendezvous_port_min() <= 0 || reg.rendezvous_port_max() > 65535 ||
      reg.rendezvous_port_min() > reg.rendezvous_port_max()) {
    return absl::InvalidArgumentError(
        absl::StrCat("register: bad rendezvous port range ", reg.rendezvous_port_min(), "-",
                     reg.rendezvous_port_max()));
  }
  absl::MutexLock lock(&mu_);
  WorkerRuntime& w = workers_[reg.name()];
  if (w.connected && w.conn != conn && w.channel) {
    w.channel->Close("replaced by a newer connection of the same worker");
  }
  w.conn = conn;
  w.reg = reg;
  w.channel = std::move(channel);
  w.connected = true;
  w.last_seen = clock_->Now();
  if (w.next_port < reg.rendezvous_port_min() || w.next_port > reg.rendezvous_port_max()) {
    w.next_port = reg.rendezvous_port_min();
  }
  v1::ControllerMessage ack;
  ack.mutable_register_ack()->set_heartbeat_interval_ms(
      static_cast<int32_t>(absl::ToInt64Milliseconds(options_.heartbeat_interval)));
  w.channel->Send(std::move(ack));
  spdlog::info("worker={} registered slots={} address={} running_attempts={}", reg.name(),
               reg.slots(), reg.address(), reg.running_size());

  // Reconcile what the worker runs with what the controller believes.
  std::set<std::pair<std::string, int>> reported;
  for (const auto& ra : reg.running()) {
    reported.insert({ra.job_id(), ra.attempt()});
    auto it = jobs_.find(ra.job_id());
    bool wanted = it != jobs_.end() && it->second.job.attempt() == ra.attempt() &&
                  IsActive(it->second) && !it->second.tearing_down;
    if (!wanted) {
      v1::ControllerMessage cancel;
      cancel.mutable_cancel()->set_job_id(ra.job_id());
      cancel.mutable_cancel()->set_attempt(ra.attempt());
      cancel.mutable_cancel()->set_reason("the controller does not run this attempt");
      w.channel->Send(std::move(cancel));
    }
  }
  for (auto& [id, rt] : jobs_) {
    if (rt.live == 0 || reported.count({id, rt.job.attempt()})) continue;
    for (const auto& r : rt.job.placement().ranks()) {
      if (r.worker() != reg.name() || rt.ranks[r.rank()] == RankPhase::kEnded) continue;
      RankEndedLocked(rt, r.rank());
      if (!IsTerminal(rt.job.state()) && !rt.tearing_down) {
        FailAttemptLocked(rt, absl::StrCat("rank ", r.rank(), " on worker ", reg.name(),
                                           " is gone (the worker restarted)"));
      }
    }
  }
  UpdateSlotMetricsLocked();
  ScheduleLocked();
  return absl::OkStatus();
}

void JobManager::Heartbeat(int64_t conn, const v1::Heartbeat& heartbeat) {
  absl::MutexLock lock(&mu_);
  if (WorkerRuntime* w = WorkerByConnLocked(conn)) w->last_seen = clock_->Now();
}

absl::Status JobManager::IngestEvents(int64_t conn, const v1::EventBatch& batch) {
  // Group by job, keeping each job's order.
  std::map<std::string, std::vector<v1::Event>> by_job;
  for (const auto& e : batch.events()) by_job[e.job_id()].push_back(e);

  absl::MutexLock lock(&mu_);
  WorkerRuntime* w = WorkerByConnLocked(conn);
  if (w == nullptr) {
    return absl::FailedPreconditionError("events before Register on this stream");
  }
  w->last_seen = clock_->Now();
  const std::string worker_name = w->reg.name();
  for (auto& [job_id, events] : by_job) {
    auto it = jobs_.find(job_id);
    if (it == jobs_.end()) {
      spdlog::warn("worker={} sent {} events for unknown job={}", worker_name, events.size(),
                   job_id);
      continue;
    }
    JobRuntime& rt = it->second;
    for (auto& e : events) {
      if (!e.has_time()) SetTimestamp(e.mutable_time(), clock_->Now());
    }
    TY_ASSIGN_OR_RETURN(auto committed, store_->AppendEvents(job_id, std::move(events)));
    metrics_->EventsIngested(static_cast<int>(committed.size()));
    for (const auto& e : committed) {
      if (e.has_step_metrics()) metrics_->StepReported(job_id, e.step_metrics());
      if (e.has_compile()) metrics_->CompileReported(job_id, e.compile());
      if (e.has_rank_state() && e.attempt() == rt.job.attempt()) ApplyRankStateLocked(rt, e);
    }
    hub_->Notify(job_id);
  }
  UpdateSlotMetricsLocked();
  ScheduleLocked();
  return absl::OkStatus();
}

void JobManager::StreamClosed(int64_t conn) {
  absl::MutexLock lock(&mu_);
  WorkerRuntime* w = WorkerByConnLocked(conn);
  if (w == nullptr) return;
  spdlog::warn("worker={} disconnected; lost unless it reconnects within {}s", w->reg.name(),
               absl::ToInt64Seconds(options_.heartbeat_timeout));
  w->connected = false;
  w->channel.reset();
  w->last_seen = clock_->Now();
  UpdateSlotMetricsLocked();
}

void JobManager::Tick() {
  absl::MutexLock lock(&mu_);
  const absl::Time now = clock_->Now();
  std::vector<std::pair<std::string, std::string>> lost;
  for (const auto& [name, w] : workers_) {
    absl::Duration silent = now - w.last_seen;
    if (silent <= options_.heartbeat_timeout) continue;
    lost.push_back({name, absl::StrCat(w.connected ? "no heartbeat for " : "disconnected for ",
                                       absl::ToInt64Seconds(silent), "s")});
  }
  for (const auto& [name, why] : lost) WorkerLostLocked(name, why);
  if (!lost.empty()) ScheduleLocked();
  metrics_->Sweep(now, options_.metrics_grace);
}

// ---- private ----

int JobManager::FreeSlotsLocked(const std::string& worker) {
  auto wit = workers_.find(worker);
  if (wit == workers_.end()) return 0;
  int used = 0;
  for (const auto& [id, rt] : jobs_) {
    if (rt.live == 0) continue;
    for (const auto& r : rt.job.placement().ranks()) {
      if (r.worker() == worker && rt.ranks[r.rank()] != RankPhase::kEnded) ++used;
    }
  }
  return std::max(0, wit->second.reg.slots() - used);
}

int JobManager::TotalSlotsLocked() {
  int total = 0;
  for (const auto& [name, w] : workers_) {
    if (w.connected) total += w.reg.slots();
  }
  return total;
}

JobManager::WorkerRuntime* JobManager::WorkerByConnLocked(int64_t conn) {
  for (auto& [name, w] : workers_) {
    if (w.conn == conn && w.connected) return &w;
  }
  return nullptr;
}

absl::Status JobManager::SetStateLocked(JobRuntime& rt, v1::Job::State state,
                                        const std::string& reason) {
  const absl::Time now = clock_->Now();
  v1::Job& job = rt.job;
  job.set_state(state);
  job.set_pending_reason(state == v1::Job::PENDING ? reason : "");
  if (state == v1::Job::RUNNING && !job.has_start_time()) {
    SetTimestamp(job.mutable_start_time(), now);
  }
  if (state == v1::Job::FAILED || state == v1::Job::CANCELLED) job.set_failure_reason(reason);
  if (IsTerminal(state)) SetTimestamp(job.mutable_end_time(), now);
  auto status = store_->PutJob(job);
  if (!status.ok()) spdlog::error("job={} persisting state: {}", job.id(), std::string(status.message()));
  metrics_->JobEntered(state);
  spdlog::info("job={} attempt={} state={} {}", job.id(), job.attempt(), StateName(state),
               reason);
  v1::Event event;
  event.mutable_job_state()->set_state(state);
  event.mutable_job_state()->set_reason(reason);
  EmitLocked(rt, std::move(event));
  if (IsTerminal(state)) {
    metrics_->JobEnded(job.id(), now);
    if (rt.live == 0) hub_->MarkSettled(job.id());
  }
  return status;
}

void JobManager::EmitLocked(JobRuntime& rt, v1::Event event) {
  event.set_rank(-1);
  event.set_attempt(rt.job.attempt());
  SetTimestamp(event.mutable_time(), clock_->Now());
  std::vector<v1::Event> one;
  one.push_back(std::move(event));
  auto committed = store_->AppendEvents(rt.job.id(), std::move(one));
  if (!committed.ok()) {
    spdlog::error("job={} storing event: {}", rt.job.id(), std::string(committed.status().message()));
    return;
  }
  hub_->Notify(rt.job.id());
}

void JobManager::ScheduleLocked() {
  std::vector<JobRuntime*> pending;
  for (auto& [id, rt] : jobs_) {
    if (rt.job.state() == v1::Job::PENDING) pending.push_back(&rt);
  }
  if (pending.empty()) return;
  std::sort(pending.begin(), pending.end(), [](const JobRuntime* a, const JobRuntime* b) {
    if (a->job.spec().job().priority() != b->job.spec().job().priority()) {
      return a->job.spec().job().priority() > b->job.spec().job().priority();
    }
    return a->order < b->order;
  });
  std::vector<QueuedJob> queue;
  for (auto* rt : pending) queue.push_back({rt->job.id(), &rt->job.spec()});
  std::vector<WorkerSnapshot> snapshot;
  for (const auto& [name, w] : workers_) {
    if (w.connected) snapshot.push_back({name, FreeSlotsLocked(name)});
  }
  auto decisions = GangScheduler::PlaceQueue(queue, std::move(snapshot));
  for (size_t i = 0; i < decisions.size(); ++i) {
    JobRuntime& rt = *pending[i];
    const GangDecision& d = decisions[i];
    if (d.placed) {
      StartAttemptLocked(rt, d.rank_workers);
    } else if (d.pending_reason != rt.job.pending_reason()) {
      SetStateLocked(rt, v1::Job::PENDING, d.pending_reason).IgnoreError();
    }
  }
  UpdateSlotMetricsLocked();
}

void JobManager::StartAttemptLocked(JobRuntime& rt,
                                    const std::vector<std::string>& rank_workers) {
  v1::Job& job = rt.job;
  const int world = static_cast<int>(rank_workers.size());
  job.set_attempt(job.attempt() + 1);
  job.clear_placement();
  std::map<std::string, std::vector<int>> by_worker;
  for (int r = 0; r < world; ++r) {
    auto* pr = job.mutable_placement()->add_ranks();
    pr->set_rank(r);
    pr->set_worker(rank_workers[r]);
    by_worker[rank_workers[r]].push_back(r);
  }
  WorkerRuntime& master = workers_[rank_workers[0]];
  job.mutable_placement()->set_master_addr(master.reg.address());
  job.mutable_placement()->set_master_port(AllocatePortLocked(master));
  rt.ranks.assign(world, RankPhase::kAssigned);
  rt.live = world;
  rt.running = 0;
  rt.exited_ok = 0;
  rt.tearing_down = false;

  std::vector<std::string> parts;
  for (const auto& [name, ranks] : by_worker) {
    parts.push_back(absl::StrCat(name, "×", ranks.size()));
  }
  SetStateLocked(rt, v1::Job::SCHEDULED, absl::StrCat("placed on ", absl::StrJoin(parts, ", ")))
      .IgnoreError();
  for (const auto& [name, ranks] : by_worker) {
    v1::ControllerMessage msg;
    auto* assign = msg.mutable_assign();
    assign->set_job_id(job.id());
    assign->set_attempt(job.attempt());
    *assign->mutable_spec() = job.spec();
    assign->set_world_size(world);
    for (int r : ranks) assign->add_ranks(r);
    assign->set_master_addr(job.placement().master_addr());
    assign->set_master_port(job.placement().master_port());
    workers_[name].channel->Send(std::move(msg));
  }
}

int JobManager::AllocatePortLocked(WorkerRuntime& w) {
  std::set<int> in_use;
  for (const auto& [id, rt] : jobs_) {
    if (rt.live > 0 && rt.job.placement().ranks_size() > 0 &&
        rt.job.placement().ranks(0).worker() == w.reg.name()) {
      in_use.insert(rt.job.placement().master_port());
    }
  }
  const int lo = w.reg.rendezvous_port_min();
  const int span = w.reg.rendezvous_port_max() - lo + 1;
  // Rotate through the range so a port just released (maybe in TIME_WAIT) is not
  // reused at once.
  for (int i = 0; i < span; ++i) {
    int port = lo + (w.next_port - lo + i) % span;
    if (!in_use.count(port)) {
      w.next_port = lo + (port - lo + 1) % span;
      return port;
    }
  }
  // Validation caps gangs by slots and every live job holds at least one slot, so a
  // range at least as large as the slots cannot run out.
  return lo;
}

void JobManager::ApplyRankStateLocked(JobRuntime& rt, const v1::Event& event) {
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
      if (rt.running == static_cast<int>(rt.ranks.size()) &&
          rt.job.state() == v1::Job::SCHEDULED && !rt.tearing_down) {
        SetStateLocked(rt, v1::Job::RUNNING, "all ranks running").IgnoreError();
      }
      break;
    case v1::RankState::EXITED:
      if (rt.ranks[r] == RankPhase::kEnded) break;
      RankEndedLocked(rt, r);
      ++rt.exited_ok;
      if (rt.exited_ok == static_cast<int>(rt.ranks.size()) && !IsTerminal(rt.job.state())) {
        SetStateLocked(rt, v1::Job::SUCCEEDED, "all ranks exited 0").IgnoreError();
      }
      break;
    case v1::RankState::FAILED:
    case v1::RankState::KILLED: {
      if (rt.ranks[r] == RankPhase::kEnded) break;
      RankEndedLocked(rt, r);
      if (!IsTerminal(rt.job.state()) && !rt.tearing_down) {
        const char* what = rs.state() == v1::RankState::FAILED ? " failed: " : " was killed: ";
        FailAttemptLocked(rt, absl::StrCat(where, what, rs.message()));
      }
      break;
    }
    default:
      break;
  }
}

void JobManager::RankEndedLocked(JobRuntime& rt, int rank) {
  if (rt.ranks[rank] == RankPhase::kEnded) return;
  rt.ranks[rank] = RankPhase::kEnded;
  if (--rt.live > 0) return;
  if (IsTerminal(rt.job.state())) {
    hub_->MarkSettled(rt.job.id());
  } else if (rt.job.state() == v1::Job::RESTARTING) {
    SetStateLocked(rt, v1::Job::PENDING, "restarting: waiting for slots").IgnoreError();
  }
}

void JobManager::FailAttemptLocked(JobRuntime& rt, const std::string& cause) {
  rt.tearing_down = true;
  SendCancelLocked(rt, cause);
  const int max_restarts = rt.job.spec().restart().max_restarts();
  const int restarts_used = rt.job.attempt() - 1;
  if (restarts_used < max_restarts) {
    SetStateLocked(rt, v1::Job::RESTARTING,
                   absl::StrCat(cause, "; restart ", restarts_used + 1, " of ", max_restarts))
        .IgnoreError();
    if (rt.live == 0) {
      SetStateLocked(rt, v1::Job::PENDING, "restarting: waiting for slots").IgnoreError();
    }
  } else {
    SetStateLocked(rt, v1::Job::FAILED, cause).IgnoreError();
  }
}

void JobManager::SendCancelLocked(JobRuntime& rt, const std::string& reason) {
  std::set<std::string> targets;
  for (const auto& r : rt.job.placement().ranks()) {
    if (rt.ranks[r.rank()] != RankPhase::kEnded) targets.insert(r.worker());
  }
  for (const auto& name : targets) {
    auto it = workers_.find(name);
    if (it == workers_.end() || !it->second.connected || !it->second.channel) continue;
    v1::ControllerMessage msg;
    msg.mutable_cancel()->set_job_id(rt.job.id());
    msg.mutable_cancel()->set_attempt(rt.job.attempt());
    msg.mutable_cancel()->set_reason(reason);
    it->second.channel->Send(std::move(msg));
  }
}

void JobManager::WorkerLostLocked(const std::string& name, const std::string& why) {
  auto wit = workers_.find(name);
  if (wit == workers_.end()) return;
  spdlog::error("worker={} lost: {}", name, why);
  if (wit->second.channel) wit->second.channel->Close(absl::StrCat("worker lost: ", why));
  for (auto& [id, rt] : jobs_) {
    if (rt.live == 0) continue;
    for (const auto& r : rt.job.placement().ranks()) {
      if (r.worker() != name || rt.ranks[r.rank()] == RankPhase::kEnded) continue;
      RankEndedLocked(rt, r.rank());
      if (!IsTerminal(rt.job.state()) && !rt.tearing_down) {
        FailAttemptLocked(rt, absl::StrCat("worker ", name, " lost (", why, ") running rank ",
                                           r.rank()));
      }
    }
  }
  workers_.erase(name);
  UpdateSlotMetricsLocked();
}

void JobManager::UpdateSlotMetricsLocked() {
  int connected = 0, total = 0, free = 0;
  for (const auto& [name, w] : workers_) {
    if (!w.connected) continue;
    ++connected;
    total += w.reg.slots();
    free += FreeSlotsLocked(name);
  }
  metrics_->SetWorkersConnected(connected);
  metrics_->SetSlots(total, free);
}

}  // namespace trainyard
