#include "server/gang_scheduler.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace trainyard {

GangDecision GangScheduler::Place(const std::string& job_id, const v1::JobSpec& spec,
                                  const std::vector<WorkerSnapshot>& workers) {
  GangDecision decision;
  decision.job_id = job_id;
  const int tp = spec.parallelism().tp();
  const int dp = spec.parallelism().dp();
  const int world = dp * tp;
  const int per_worker_cap = spec.resources().ranks_per_worker();  // 0: no cap

  if (workers.empty()) {
    decision.pending_reason = absl::StrCat("needs ", world, " slots; no workers connected");
    return decision;
  }
  // Most free first, so a gang lands on as few workers as possible; name breaks ties
  // so the decision is deterministic.
  std::vector<const WorkerSnapshot*> order;
  for (const auto& w : workers) order.push_back(&w);
  std::sort(order.begin(), order.end(), [](const WorkerSnapshot* a, const WorkerSnapshot* b) {
    if (a->free_slots != b->free_slots) return a->free_slots > b->free_slots;
    return a->name < b->name;
  });

  int total_free = 0;
  int largest_free = 0;
  int blocks_available = 0;
  for (const auto* w : order) {
    int usable = per_worker_cap > 0 ? std::min(w->free_slots, per_worker_cap) : w->free_slots;
    total_free += w->free_slots;
    largest_free = std::max(largest_free, w->free_slots);
    blocks_available += usable / tp;
  }
  if (blocks_available < dp) {
    if (total_free < world) {
      decision.pending_reason = absl::StrCat("needs ", world, " slots; ", total_free,
                                             " free across ", workers.size(), " workers");
    } else if (tp > 1) {
      decision.pending_reason =
          absl::StrCat("needs ", world, " slots with TP=", tp,
                       " inside one worker; largest free block is ", largest_free);
    } else {
      decision.pending_reason = absl::StrCat("needs ", world, " slots at most ",
                                             per_worker_cap, " per worker; only ",
                                             blocks_available, " usable");
    }
    return decision;
  }
  decision.rank_workers.reserve(world);
  int blocks_left = dp;
  for (const auto* w : order) {
    int usable = per_worker_cap > 0 ? std::min(w->free_slots, per_worker_cap) : w->free_slots;
    for (int b = usable / tp; b > 0 && blocks_left > 0; --b, --blocks_left) {
      for (int t = 0; t < tp; ++t) decision.rank_workers.push_back(w->name);
    }
  }
  decision.placed = true;
  return decision;
}

void GangScheduler::OrderQueue(std::vector<QueuedJob>* queue) {
  std::stable_sort(queue->begin(), queue->end(), [](const QueuedJob& a, const QueuedJob& b) {
    const int pa = a.spec->job().priority(), pb = b.spec->job().priority();
    if (pa != pb) return pa > pb;
    return a.order < b.order;
  });
}

std::vector<GangDecision> GangScheduler::PlaceQueue(const std::vector<QueuedJob>& queue,
                                                    std::vector<WorkerSnapshot> workers) {
  std::vector<GangDecision> out;
  const std::string* blocker = nullptr;
  for (const auto& job : queue) {
    if (blocker != nullptr) {
      GangDecision waiting;
      waiting.job_id = job.id;
      waiting.pending_reason = absl::StrCat("queued behind ", *blocker);
      out.push_back(std::move(waiting));
      continue;
    }
    GangDecision d = Place(job.id, *job.spec, workers);
    if (d.placed) {
      for (const auto& name : d.rank_workers) {
        for (auto& w : workers) {
          if (w.name == name) --w.free_slots;
        }
      }
    } else {
      blocker = &job.id;
    }
    out.push_back(std::move(d));
  }
  return out;
}

}  // namespace trainyard
