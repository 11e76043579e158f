#include "server/state/scheduling_cycle.h"

#include <optional>
#include <set>
#include <utility>

#include "server/policy/elastic_policy.h"
#include "spdlog/spdlog.h"

namespace trainyard {

void SchedulingCycle::Run(Effects* fx) {
  const absl::Time now = clock_->Now();
  fair_share_->Observe(FairShareManager::InUseByOwner(jobs_->jobs()));
  std::vector<QueuedJob> queue = Enqueue(now, fx);
  queue_order_.clear();
  if (queue.empty()) return;
  fair_share_->Order(&queue, jobs_->jobs());
  const std::vector<GangDecision> decisions = Plan(&queue, fx);
  if (queue.empty()) return;
  const std::set<std::string> placed_now = Bind(queue, decisions, now, fx);
  fair_share_->Observe(FairShareManager::InUseByOwner(jobs_->jobs()));  // with what this pass placed
  evictions_->MaybePreempt(queue, decisions, placed_now, fx);
}

std::vector<QueuedJob> SchedulingCycle::Enqueue(absl::Time now, Effects* fx) {
  std::vector<QueuedJob> queue;
  std::vector<WorkerSnapshot> free;
  bool free_read = false;
  for (const auto& gate : gates_) gate->BeginPass(now);
  for (auto& [id, rt] : jobs_->jobs()) {
    if (rt.job.state() != v1::Job::PENDING) continue;
    rt.layout.reset();
    rt.queue_position = 0;
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
    std::optional<std::string> held;
    for (const auto& gate : gates_) {
      held = gate->Hold(rt, q, now);
      if (held) break;
    }
    if (held) {
      Hold(rt, *held, fx);
      continue;
    }
    q.rank_memory_bytes = RankMemoryOf(rt, *q.spec);
    queue.push_back(std::move(q));
  }
  return queue;
}

std::vector<GangDecision> SchedulingCycle::Plan(std::vector<QueuedJob>* queue, Effects* fx) {
  const absl::Time now = clock_->Now();
  std::vector<RunningJob> running;
  for (const auto& [id, rt] : jobs_->jobs()) {
    if (rt.live > 0) running.push_back(RunningJobOf(rt, now));
  }
  const std::vector<WorkerSnapshot> fleet = workers_->ConnectedFree();
  while (!queue->empty()) {
    std::vector<GangDecision> decisions = GangScheduler::PlanQueue(*queue, fleet, running);
    // Each placed job's needs on top of its owner's use so far in this pass.
    std::map<std::string, SlotUse> use = fair_share_->owner_use();
    size_t over = decisions.size();
    std::string why;
    for (size_t i = 0; i < decisions.size() && over == decisions.size(); ++i) {
      if (!decisions[i].placed) continue;
      const std::string& owner = jobs_->jobs().at((*queue)[i].id).job.owner();
      const SlotUse needs = FairShareManager::NeedsOf(*(*queue)[i].spec);
      why = fair_share_->OverQuota(use, owner, needs);
      if (!why.empty()) {
        over = i;
      } else {
        use[owner].slots += needs.slots;
        use[owner].gpus += needs.gpus;
      }
    }
    if (over == decisions.size()) return decisions;
    TrackedJob& rt = jobs_->jobs().at((*queue)[over].id);
    Hold(rt, AfterEviction(rt, why), fx);
    queue->erase(queue->begin() + static_cast<std::ptrdiff_t>(over));
  }
  return {};
}

std::set<std::string> SchedulingCycle::Bind(const std::vector<QueuedJob>& queue,
                                            const std::vector<GangDecision>& decisions, absl::Time now, Effects* fx) {
  // Positions count the jobs that still wait, in scheduling order.
  for (size_t i = 0; i < decisions.size(); ++i) {
    if (decisions[i].placed) continue;
    queue_order_.push_back(queue[i].id);
    jobs_->jobs().at(queue[i].id).queue_position = static_cast<int>(queue_order_.size());
  }
  std::set<std::string> placed_now;
  for (size_t i = 0; i < decisions.size(); ++i) {
    TrackedJob& rt = jobs_->jobs().at(queue[i].id);
    const GangDecision& d = decisions[i];
    rt.estimated_start.reset();
    if (d.placed) {
      placed_now.insert(rt.job.id());
      if (d.backfilled) spdlog::info("job={} backfilled ahead of the queue's head", rt.job.id());
      rt.reserved_workers.clear();
      jobs_->StartAttempt(rt, d, fx);
      continue;
    }
    if (d.estimated_start) rt.estimated_start = now + *d.estimated_start;
    rt.reserved_workers = d.reserved_workers;
    if (std::string why = PendingReasonOf(rt, d, now); why != rt.job.pending_reason()) {
      jobs_->SetState(rt, v1::Job::PENDING, why, fx);
    }
  }
  return placed_now;
}

void SchedulingCycle::Hold(TrackedJob& rt, const std::string& reason, Effects* fx) {
  rt.estimated_start.reset();
  rt.reserved_workers.clear();
  rt.queue_position = 0;
  if (reason != rt.job.pending_reason()) jobs_->SetState(rt, v1::Job::PENDING, reason, fx);
}

}  // namespace trainyard
