#include "server/policy/preemption_policy.h"

#include <algorithm>
#include <map>
#include <tuple>
#include <utility>

namespace trainyard {

bool PreemptionPolicy::Eligible(const PreemptionCandidate& c, int priority, int max_preemptions_per_hour) {
  // "Preempted more than N times in an hour is not preempted again": N times is still fine.
  return c.priority < priority && c.preemptible && c.preemptions_last_hour <= max_preemptions_per_hour;
}

std::vector<WorkerSnapshot> PreemptionPolicy::Freed(const std::vector<WorkerSnapshot>& workers,
                                                    const std::vector<const PreemptionCandidate*>& victims) {
  std::vector<WorkerSnapshot> out;
  std::map<std::string, size_t> index;
  for (const auto& w : workers) {
    if (w.cordoned) continue;
    index.emplace(w.name, out.size());
    out.push_back(w);
  }
  for (const PreemptionCandidate* v : victims) {
    for (size_t i = 0; i < v->rank_workers.size(); ++i) {
      auto it = index.find(v->rank_workers[i]);
      if (it == index.end()) continue;  // cordoned or disconnected: nothing comes back
      WorkerSnapshot& w = out[it->second];
      ++w.free_slots;
      const int gpu = i < v->rank_gpus.size() ? v->rank_gpus[i] : -1;
      if (gpu < 0) continue;
      for (auto& g : w.gpus) {
        if (g.index == gpu) g.held = false;
      }
    }
  }
  return out;
}

std::optional<PreemptionPlan> PreemptionPolicy::Plan(const QueuedJob& pending,
                                                     const std::vector<WorkerSnapshot>& workers,
                                                     const std::vector<PreemptionCandidate>& candidates,
                                                     int max_preemptions_per_hour) {
  if (pending.spec == nullptr) return std::nullopt;
  const int priority = pending.spec->job().priority();

  GangDecision now = GangScheduler::PlaceQueued(pending, Freed(workers, {}));
  if (now.placed) return PreemptionPlan{{}, std::move(now)};

  std::vector<const PreemptionCandidate*> order;
  for (const auto& c : candidates) {
    if (Eligible(c, priority, max_preemptions_per_hour)) order.push_back(&c);
  }
  // Cheapest first: lowest priority, then the most recently started (least work lost).
  std::sort(order.begin(), order.end(), [](const PreemptionCandidate* a, const PreemptionCandidate* b) {
    return std::make_tuple(a->priority, b->attempt_started, b->id) <
           std::make_tuple(b->priority, a->attempt_started, a->id);
  });

  // Fewest first: one victim alone when one makes room (the cheapest such).
  for (const PreemptionCandidate* c : order) {
    GangDecision alone = GangScheduler::PlaceQueued(pending, Freed(workers, {c}));
    if (alone.placed) return PreemptionPlan{{c->id}, std::move(alone)};
  }

  std::vector<const PreemptionCandidate*> victims;
  bool placed = false;
  for (const PreemptionCandidate* c : order) {
    victims.push_back(c);
    if (GangScheduler::PlaceQueued(pending, Freed(workers, victims)).placed) {
      placed = true;
      break;
    }
  }
  if (!placed) return std::nullopt;

  // Spare every victim the placement does not need, the newest-added first.
  for (size_t k = victims.size(); k-- > 0;) {
    std::vector<const PreemptionCandidate*> without = victims;
    without.erase(without.begin() + static_cast<long>(k));
    if (GangScheduler::PlaceQueued(pending, Freed(workers, without)).placed) victims = std::move(without);
  }

  PreemptionPlan plan;
  plan.placement = GangScheduler::PlaceQueued(pending, Freed(workers, victims));
  for (const PreemptionCandidate* v : victims) plan.victims.push_back(v->id);
  return plan;
}

}  // namespace trainyard
