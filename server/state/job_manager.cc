#include "server/state/job_manager.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/spec/spec_error.h"
#include "server/state/quota_gate.h"
#include "server/state/restart_backoff_gate.h"
#include "spdlog/spdlog.h"

namespace trainyard {
namespace {

// Jobs whose ranks may still run or that wait to restart: Recover replays their events.
bool NeedsEvents(const v1::Job& job) {
  const v1::Job::State s = job.state();
  return s == v1::Job::SCHEDULED || s == v1::Job::RUNNING || s == v1::Job::RESTARTING ||
         (s == v1::Job::PENDING && job.attempt() > 0);
}

}  // namespace

JobManager::JobManager(JobStore* store, EventHub* hub, ControllerMetrics* metrics, Clock* clock,
                       JobManagerOptions options)
    : store_(store),
      hub_(hub),
      metrics_(metrics),
      clock_(clock),
      options_(options),
      registry_(clock, options.heartbeat_interval, options.heartbeat_timeout, options.reconnect_window),
      jobs_(&registry_, metrics, clock, options.max_events_per_s_per_rank),
      fair_share_(metrics, clock),
      evictions_(&jobs_, &registry_, metrics, clock, options.sharing),
      faults_(&jobs_, &registry_, clock),
      cycle_(&jobs_, &fair_share_, &evictions_, &registry_, clock) {
  absl::MutexLock lock(&mu_);
  // The queue gates, in the order they are asked: a job that waits for another says so
  // first (it could not start whatever its quota); a job backing off says so, whatever
  // its quota.
  auto dependencies = std::make_unique<DependencyGate>(&jobs_);
  dependencies_ = dependencies.get();
  cycle_.AddGate(std::move(dependencies));
  cycle_.AddGate(std::make_unique<RestartBackoffGate>());
  cycle_.AddGate(std::make_unique<QuotaGate>(&fair_share_));
  // Last: a child held by an earlier gate keeps its sweep turn (SweepGate).
  auto sweeps = std::make_unique<SweepGate>(&jobs_);
  sweeps_ = sweeps.get();
  cycle_.AddGate(std::move(sweeps));
}

absl::Status JobManager::Recover() {
  TY_ASSIGN_OR_RETURN(auto jobs, store_->LoadJobs());
  TY_ASSIGN_OR_RETURN(auto cordons, store_->LoadCordons());
  TY_ASSIGN_OR_RETURN(auto usage, store_->LoadUsage());
  TY_ASSIGN_OR_RETURN(auto sweeps, store_->LoadSweeps());
  std::vector<std::vector<v1::Event>> events(jobs.size());
  std::vector<int64_t> last_seq(jobs.size());
  for (size_t i = 0; i < jobs.size(); ++i) {
    if (NeedsEvents(jobs[i])) {  // not the whole log: the kinds Recover uses, a tail of steps
      const int tail = JobStateMachine::RecoveryStepTail(jobs[i]);
      TY_ASSIGN_OR_RETURN(events[i], store_->ReadRecoveryEvents(jobs[i].id(), jobs[i].attempt(), tail));
    }
    last_seq[i] = store_->LastSeq(jobs[i].id());
  }
  absl::MutexLock commit(&commit_mu_);
  Write([&](Effects* fx) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    registry_.RestoreCordons(std::move(cordons));
    fair_share_.RestoreUsage(usage);
    for (v1::Sweep& sweep : sweeps) sweeps_->Add(std::move(sweep));
    for (size_t i = 0; i < jobs.size(); ++i) {
      const std::string id = jobs[i].id();
      JobView view{jobs[i], 0, last_seq[i]};
      view.order = jobs_.Recover(std::move(jobs[i]), events[i], fx);
      views_[id] = std::move(view);
    }
    // A crash between a dependency's end and its dependents' failure left them waiting.
    dependencies_->FailUnsatisfiable(fx);
    return absl::OkStatus();
  }).IgnoreError();  // logged by Run
  return absl::OkStatus();
}

absl::Status JobManager::Reject(absl::Status status) {
  metrics_->JobRejected();
  spdlog::info("rejected job: {}", std::string(status.message()));
  return status;
}

FleetView JobManager::FleetLocked() {
  FleetView fleet;
  fleet.connected_slots = registry_.ConnectedSlots();
  fleet.idle_workers = registry_.ConnectedTotal();
  std::tie(fleet.largest_memory_worker, fleet.largest_memory_bytes) = registry_.LargestMemory();
  fleet.workers = registry_.ConnectedFleet();
  return fleet;
}

absl::Status JobManager::Validate(v1::JobSpec* spec, const OwnerFilter& may_see) {
  FleetView fleet;
  {
    absl::MutexLock lock(&mu_);
    fleet = FleetLocked();
  }
  auto admitted = AdmissionPolicy::Admit(std::move(*spec), fleet);
  if (!admitted.ok()) return Reject(admitted.status());
  {
    absl::MutexLock lock(&mu_);
    if (auto s = dependencies_->CheckNew(*admitted, may_see); !s.ok()) return Reject(s);
  }
  *spec = std::move(*admitted);
  return absl::OkStatus();
}

absl::StatusOr<v1::Job> JobManager::Submit(v1::JobSpec spec, const std::string& owner, const OwnerFilter& may_see) {
  FleetView fleet;
  {
    absl::MutexLock lock(&mu_);
    fleet = FleetLocked();
  }
  auto admitted = AdmissionPolicy::Admit(std::move(spec), fleet);
  if (!admitted.ok()) return Reject(admitted.status());
  std::vector<v1::Event> first(1);
  v1::Job job = JobStateMachine::NewJob(std::move(*admitted), owner, clock_->Now(), &first[0]);

  absl::MutexLock commit(&commit_mu_);
  {
    // Under the commit lock: no dependency can end between this check and the job
    // joining the table, where the ended-job listener sees it.
    absl::MutexLock lock(&mu_);
    if (auto s = dependencies_->CheckNew(job.spec(), may_see); !s.ok()) return Reject(s);
  }
  // The row and its PENDING event, in one transaction; nothing exists when it fails.
  TY_RETURN_IF_ERROR(store_->CreateJob(&job, &first));
  const std::string id = job.id();
  Effects fx;
  fx.Notify(id);
  Write(
      [&](Effects*) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        JobView view{job, 0, first.empty() ? 0 : first.back().seq()};
        view.order = jobs_.Add(std::move(job));
        views_[id] = std::move(view);
        return absl::OkStatus();
      },
      std::move(fx))
      .IgnoreError();  // the job exists; a failed placement write is logged
  absl::MutexLock lock(&mu_);
  return ViewLocked(id);
}

v1::Job JobManager::ViewLocked(const std::string& id) {
  const JobView& view = views_.at(id);
  v1::Job out = view.job;
  out.set_last_seq(view.last_seq);
  jobs_.FillEstimate(id, &out);
  if (const TrackedJob* rt = jobs_.Find(id)) {
    fair_share_.FillShare(*rt, static_cast<int>(cycle_.queue_order().size()), &out);
  }
  faults_.FillUnreachable(id, &out);
  return out;
}

absl::StatusOr<v1::Job> JobManager::Get(const std::string& id) {
  absl::MutexLock lock(&mu_);
  if (!views_.count(id)) return absl::NotFoundError(absl::StrCat("job ", id, " not found"));
  return ViewLocked(id);
}

std::vector<v1::Job> JobManager::List(const std::vector<v1::Job::State>& states, int limit, const std::string& owner,
                                      bool without_sweep_children) {
  absl::MutexLock lock(&mu_);
  std::vector<const JobView*> rows;
  for (const auto& [id, view] : views_) {
    if (!owner.empty() && view.job.owner() != owner) continue;
    if (without_sweep_children && !view.job.sweep_id().empty()) continue;
    if (!states.empty() && std::find(states.begin(), states.end(), view.job.state()) == states.end()) {
      continue;
    }
    rows.push_back(&view);
  }
  // Newest first, as a person scanning the list wants.
  std::sort(rows.begin(), rows.end(), [](const JobView* a, const JobView* b) { return a->order > b->order; });
  if (limit <= 0) limit = 100;
  std::vector<v1::Job> out;
  for (const auto* view : rows) {
    if (static_cast<int>(out.size()) >= limit) break;
    out.push_back(view->job);
    out.back().set_last_seq(view->last_seq);
  }
  return out;
}

absl::StatusOr<v1::Job> JobManager::Cancel(const std::string& id, const std::string& reason) {
  absl::MutexLock commit(&commit_mu_);
  TY_RETURN_IF_ERROR(
      Write([&](Effects* fx) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return jobs_.Cancel(id, reason, fx); }));
  absl::MutexLock lock(&mu_);
  return ViewLocked(id);
}

absl::StatusOr<v1::Job> JobManager::Resize(const std::string& id, int dp) {
  absl::MutexLock commit(&commit_mu_);
  TY_RETURN_IF_ERROR(Write([&](Effects* fx) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return jobs_.Resize(id, dp, fx); }));
  absl::MutexLock lock(&mu_);
  return ViewLocked(id);
}

std::vector<v1::WorkerInfo> JobManager::Workers() {
  absl::MutexLock lock(&mu_);
  return registry_.List();
}

absl::Status JobManager::RegisterWorker(int64_t conn, const v1::Register& reg, std::shared_ptr<WorkerChannel> channel) {
  absl::MutexLock commit(&commit_mu_);
  absl::Status registered;
  Write([&](Effects* fx) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    registered = registry_.Register(conn, reg, std::move(channel), fx);
    if (!registered.ok()) return registered;
    faults_.WorkerRegistered(reg, registry_.Channel(reg.name()), fx);
    UpdateGpuMetricsLocked(reg.name());
    return absl::OkStatus();
  }).IgnoreError();  // a refused registration is returned below; a store error is logged by Run
  return registered;
}

void JobManager::Heartbeat(int64_t conn, const v1::Heartbeat& heartbeat) {
  std::vector<GpuFault> faults;
  {
    absl::MutexLock lock(&mu_);
    faults = registry_.Heartbeat(conn, heartbeat);
    if (std::optional<std::string> name = registry_.NameOf(conn)) UpdateGpuMetricsLocked(*name);
  }
  if (faults.empty()) return;
  // A GPU went out of service: a writer's path, for the attempts on it. Their holds
  // are read again under the lock, so a rank that ended in between is left alone.
  absl::MutexLock commit(&commit_mu_);
  Write([&](Effects* fx) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    faults_.GpusUnhealthy(faults, fx);
    return absl::OkStatus();
  }).IgnoreError();  // logged by Run
}

void JobManager::StreamClosed(int64_t conn) {
  absl::MutexLock lock(&mu_);
  if (registry_.Disconnect(conn)) UpdateSlotMetricsLocked();
}

void JobManager::Tick() {
  std::vector<Answer> answers;
  {
    absl::MutexLock commit(&commit_mu_);
    // Every tick ends with a scheduling pass: estimates move with time and measured
    // step times, and a job may now backfill.
    Write([&](Effects* fx) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      TickWorkersLocked(fx);
      jobs_.EnforceTimeLimits(fx);
      evictions_.EnforceEvictions(fx);
      fair_share_.Accrue(FairShareManager::InUseByOwner(jobs_.jobs()));
      if (!checkpoint_waiters_.empty()) answers = TakeAnsweredLocked("", {});
      return absl::OkStatus();
    }).IgnoreError();  // logged by Run
    if (clock_->Now() - usage_saved_ >= options_.usage_save_interval) {
      std::map<std::string, StoredUsage> usage;
      {
        absl::MutexLock lock(&mu_);
        usage = fair_share_.UsageSnapshot();
      }
      if (absl::Status s = store_->SaveUsage(usage); !s.ok()) {
        spdlog::error("storing the owners' fair-share usage: {}", std::string(s.message()));
      }
      usage_saved_ = clock_->Now();
    }
  }
  Deliver(std::move(answers));
  metrics_->Sweep(clock_->Now(), options_.metrics_grace);
}

bool JobManager::WorkerConnected(const std::string& name) {
  absl::MutexLock lock(&mu_);
  return registry_.IsConnected(name);
}

std::optional<std::vector<std::string>> JobManager::AttemptWorkers(const std::string& job_id, int attempt) {
  absl::MutexLock lock(&mu_);
  return jobs_.AttemptWorkers(job_id, attempt);
}

void JobManager::UpdateGpuMetricsLocked(const std::string& worker) {
  std::vector<GpuReading> readings;
  for (auto& g : registry_.GpuStates(worker)) {
    readings.push_back({g.device.index(), g.healthy, g.device.memory_bytes(), std::move(g.sample)});
  }
  metrics_->gpus().SetWorker(worker, readings);
}

void JobManager::UpdateSlotMetricsLocked() {
  const WorkerRegistry::Totals t = registry_.Count();
  metrics_->SetWorkersConnected(t.connected);
  metrics_->SetSlots(t.slots, t.free);
}

absl::Status JobManager::Write(absl::FunctionRef<absl::Status(Effects* fx)> op, Effects fx) {
  {
    absl::MutexLock lock(&mu_);
    absl::Status s = op(&fx);
    if (!s.ok()) return s;
    cycle_.Run(&fx);
    UpdateSlotMetricsLocked();
  }
  return Run(std::move(fx));
}

absl::Status JobManager::Run(Effects fx) {
  // 1. Store writes, in order.
  absl::Status first_error;
  struct Committed {
    std::string job_id;
    std::optional<v1::Job> job;  // a row; else events up to last_seq
    int64_t last_seq = 0;
  };
  std::vector<Committed> committed;
  std::vector<std::string> notify = fx.notified();
  for (Effects::Write& w : fx.writes()) {
    if (w.job.has_value()) {
      absl::Status s = store_->PutJob(*w.job);
      if (s.ok()) {
        committed.push_back({w.job_id, std::move(w.job), 0});
        continue;
      }
      spdlog::error("job={} persisting state: {}", w.job_id, std::string(s.message()));
      first_error = s;
      break;
    }
    auto events = store_->AppendEvents(w.job_id, std::move(w.events));
    if (!events.ok()) {
      spdlog::error("job={} storing event: {}", w.job_id, std::string(events.status().message()));
      first_error = events.status();
      break;
    }
    if (!events->empty()) committed.push_back({w.job_id, std::nullopt, events->back().seq()});
    if (std::find(notify.begin(), notify.end(), w.job_id) == notify.end()) notify.push_back(w.job_id);
  }
  // 2. Readers see what was committed.
  if (!committed.empty()) {
    absl::MutexLock lock(&mu_);
    for (Committed& c : committed) {
      auto it = views_.find(c.job_id);
      if (it == views_.end()) continue;
      if (c.job.has_value()) {
        it->second.job = std::move(*c.job);
      } else {
        it->second.last_seq = std::max(it->second.last_seq, c.last_seq);
      }
    }
  }
  // 3. Worker messages, 4. watchers: only when every write before them was committed.
  if (!first_error.ok()) {
    for (const auto& id : notify) hub_->Notify(id);  // what was committed is readable
    spdlog::critical(
        "a store write failed after a state change; {} worker message(s) and the "
        "rest of this update were not carried out: {}",
        fx.outbound().size(), std::string(first_error.message()));
    if (options_.on_lost_write) options_.on_lost_write(first_error);
    return first_error;
  }
  for (Effects::Outbound& o : fx.outbound()) {
    if (o.message.has_value()) {
      o.channel->Send(std::move(*o.message));
    } else {
      o.channel->Close(o.close_reason);
    }
  }
  for (const auto& id : notify) hub_->Notify(id);
  for (const auto& id : fx.settled()) hub_->MarkSettled(id);
  return first_error;
}

}  // namespace trainyard
