// JobLifecycle: placing pending gangs (GangScheduler) and starting their attempts.
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/policy/gang_scheduler.h"
#include "server/state/job_lifecycle.h"
#include "spdlog/spdlog.h"

namespace trainyard {

void JobLifecycle::Schedule(Effects* fx) {
  const absl::Time now = clock_->Now();
  std::vector<QueuedJob> queue;
  std::vector<WorkerSnapshot> free;
  bool free_read = false;
  for (auto& [id, rt] : jobs_) {
    if (rt.job.state() != v1::Job::PENDING) continue;
    rt.layout.reset();
    rt.queue_position = 0;
    if (now < rt.not_before) {  // backing off: not a candidate, and holds nobody back
      rt.estimated_start.reset();
      rt.reserved_workers.clear();
      if (std::string why = RestartPendingReason(rt, now); why != rt.job.pending_reason()) {
        SetState(rt, v1::Job::PENDING, why, fx);
      }
      continue;
    }
    QueuedJob q{id, &rt.job.spec(), rt.order, AvoidedWorkers(rt)};
    if (rt.resize_dp) {
      if (const v1::JobSpec* resized = ResizedSpec(rt)) q.spec = resized;
    } else if (std::optional<absl::Time> from = ElasticFrom(rt); from && now >= *from) {
      if (!free_read) free = workers_->ConnectedFree();
      free_read = true;
      // The full dp first: a gang grows back once slots return.
      if (!GangScheduler::PlaceQueued(q, free).placed) {
        rt.layout = ElasticPolicy::Shrink(id, rt.job.spec(), free);
        if (rt.layout) q.spec = &rt.layout->spec;
      }
    }
    q.rank_memory_bytes = RankMemoryOf(rt, *q.spec);
    queue.push_back(std::move(q));
  }
  // Quotas: a job over its owner's or group's limit waits apart, holding nothing back.
  const std::map<std::string, SlotUse> in_use = InUseByOwner();
  owner_use_ = in_use;
  HoldOverQuota(&queue, in_use, fx);
  queue_order_.clear();
  if (queue.empty()) return;
  // Priority, then the owner's fair share (decayed usage / weight), then FIFO.
  OrderQueueByFairShare(&queue, [&](const QueuedJob& q) {
    const std::string& owner = jobs_.at(q.id).job.owner();
    return FairShare(policy_, owner, ledger_.Value(owner, now));
  });
  std::vector<RunningJob> running;
  for (const auto& [id, rt] : jobs_) {
    if (rt.live > 0) running.push_back(RunningJobOf(rt, now));
  }
  const std::vector<WorkerSnapshot> fleet = workers_->ConnectedFree();
  std::vector<GangDecision> decisions;
  while (true) {
    decisions = GangScheduler::PlanQueue(queue, fleet, running);
    // Two jobs of one owner placed in the same pass may pass its quota together: the
    // later one waits, and the pass is planned again without it.
    std::map<std::string, SlotUse> use = in_use;
    size_t over = decisions.size();
    std::string why;
    for (size_t i = 0; i < decisions.size() && over == decisions.size(); ++i) {
      if (!decisions[i].placed) continue;
      const std::string& owner = jobs_.at(queue[i].id).job.owner();
      const SlotUse needs = NeedsOf(*queue[i].spec);
      why = QuotaCheck(policy_, use, owner, needs);
      if (!why.empty()) {
        over = i;
      } else {
        use[owner].slots += needs.slots;
        use[owner].gpus += needs.gpus;
      }
    }
    if (over == decisions.size()) break;
    QuotaHold(jobs_.at(queue[over].id), why, fx);
    queue.erase(queue.begin() + static_cast<std::ptrdiff_t>(over));
    if (queue.empty()) return;
  }
  // Positions count the jobs that still wait, in scheduling order.
  for (size_t i = 0; i < decisions.size(); ++i) {
    if (decisions[i].placed) continue;
    queue_order_.push_back(queue[i].id);
    jobs_.at(queue[i].id).queue_position = static_cast<int>(queue_order_.size());
  }
  std::set<std::string> placed_now;
  for (size_t i = 0; i < decisions.size(); ++i) {
    TrackedJob& rt = jobs_.at(queue[i].id);
    const GangDecision& d = decisions[i];
    if (d.placed) {
      placed_now.insert(rt.job.id());
      if (d.backfilled) spdlog::info("job={} backfilled ahead of the queue's head", rt.job.id());
      rt.estimated_start.reset();
      rt.reserved_workers.clear();
      StartAttempt(rt, d, fx);
      continue;
    }
    rt.estimated_start.reset();
    if (d.estimated_start) rt.estimated_start = now + *d.estimated_start;
    rt.reserved_workers = d.reserved_workers;
    if (std::string why = PendingReasonOf(rt, d, now); why != rt.job.pending_reason()) {
      SetState(rt, v1::Job::PENDING, why, fx);
    }
  }
  owner_use_ = InUseByOwner();  // with what this pass placed
  MaybePreempt(queue, decisions, placed_now, fx);
}

void JobLifecycle::StartAttempt(TrackedJob& rt, const GangDecision& decision, Effects* fx) {
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
