#include "server/policy/gang_scheduler.h"

#include <algorithm>
#include <map>

#include "absl/strings/str_cat.h"

namespace trainyard {
namespace {

// "w1=1, w2=0", most free first, at most 8 workers named.
std::string FreeList(const std::vector<const WorkerSnapshot*>& order) {
  constexpr size_t kNamed = 8;
  std::string out;
  for (size_t i = 0; i < order.size() && i < kNamed; ++i) {
    absl::StrAppend(&out, i == 0 ? "" : ", ", order[i]->name, "=", order[i]->free_slots);
  }
  if (order.size() > kNamed) absl::StrAppend(&out, " and ", order.size() - kNamed, " more");
  return out;
}

// How long `spec` will run at most, when it declares a time limit.
std::optional<absl::Duration> Bound(const v1::JobSpec& spec) {
  if (spec.job().time_limit_s() <= 0) return std::nullopt;
  return absl::Seconds(spec.job().time_limit_s());
}

// Free slots by worker name, for simulations.
using Pool = std::map<std::string, int>;

std::vector<WorkerSnapshot> Snapshot(const Pool& pool) {
  std::vector<WorkerSnapshot> out;
  for (const auto& [name, n] : pool) out.push_back({name, n});
  return out;
}

void Take(Pool* pool, const std::vector<std::string>& rank_workers, int sign) {
  for (const auto& w : rank_workers) {
    auto it = pool->find(w);
    if (it != pool->end()) it->second -= sign;  // a disconnected worker's slots never return
  }
}

struct Release {
  absl::Duration at;
  std::vector<std::string> rank_workers;
  std::string job_id;
};

// Walks `jobs` in order over a timeline that starts from `pool` and gains each
// release's slots at its time: each job starts at the earliest release time (not
// before the previous job's start) at which it fits, and gives its slots back after
// its time limit. Returns each job's start (nullopt once one cannot start) and, for the
// first, its placement, the pool left at its start and the job whose end frees it.
struct Simulation {
  std::vector<std::optional<absl::Duration>> starts;
  std::vector<std::string> first_placement;
  Pool first_leftover;
  std::string first_waits_for;
};

Simulation Simulate(const std::vector<const QueuedJob*>& jobs, Pool pool, std::vector<Release> releases) {
  Simulation sim;
  auto by_time = [](const Release& a, const Release& b) { return a.at < b.at; };
  std::sort(releases.begin(), releases.end(), by_time);
  size_t next = 0;
  absl::Duration now = absl::ZeroDuration();
  std::string last_freed_by;
  bool stuck = false;
  for (size_t j = 0; j < jobs.size(); ++j) {
    if (stuck) {
      sim.starts.push_back(std::nullopt);
      continue;
    }
    while (true) {
      GangDecision d = GangScheduler::PlaceQueued(*jobs[j], Snapshot(pool));
      if (d.placed) {
        sim.starts.push_back(now);
        Take(&pool, d.rank_workers, +1);
        if (j == 0) {
          sim.first_placement = d.rank_workers;
          sim.first_leftover = pool;
          sim.first_waits_for = last_freed_by;
        }
        if (auto bound = Bound(*jobs[j]->spec)) {
          Release r{now + *bound, d.rank_workers, jobs[j]->id};
          releases.insert(std::upper_bound(releases.begin() + next, releases.end(), r, by_time), r);
        }
        break;
      }
      if (next == releases.size()) {
        stuck = true;
        sim.starts.push_back(std::nullopt);
        break;
      }
      now = std::max(now, releases[next].at);
      Take(&pool, releases[next].rank_workers, -1);
      last_freed_by = releases[next].job_id;
      ++next;
    }
  }
  return sim;
}

}  // namespace

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
  int blocks_available = 0;
  for (const auto* w : order) {
    int usable = per_worker_cap > 0 ? std::min(w->free_slots, per_worker_cap) : w->free_slots;
    total_free += w->free_slots;
    blocks_available += usable / tp;
  }
  if (blocks_available < dp) {
    decision.pending_reason = absl::StrCat("needs ", world, " slots");
    if (tp > 1) absl::StrAppend(&decision.pending_reason, " with TP=", tp, " inside one worker");
    if (per_worker_cap > 0) absl::StrAppend(&decision.pending_reason, ", at most ", per_worker_cap, " per worker");
    absl::StrAppend(&decision.pending_reason, "; ", total_free, " free: ", FreeList(order));
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
  decision.estimated_start = absl::ZeroDuration();
  return decision;
}

void GangScheduler::OrderQueue(std::vector<QueuedJob>* queue) {
  std::stable_sort(queue->begin(), queue->end(), [](const QueuedJob& a, const QueuedJob& b) {
    const int pa = a.spec->job().priority(), pb = b.spec->job().priority();
    if (pa != pb) return pa > pb;
    return a.order < b.order;
  });
}

GangDecision GangScheduler::PlaceQueued(const QueuedJob& job, const std::vector<WorkerSnapshot>& workers) {
  if (job.avoid.empty()) return Place(job.id, *job.spec, workers);
  auto avoided = [&](const std::string& name) {
    return std::find(job.avoid.begin(), job.avoid.end(), name) != job.avoid.end();
  };
  std::vector<WorkerSnapshot> others;
  std::vector<std::string> present;
  for (const auto& w : workers) {
    if (!avoided(w.name)) {
      others.push_back(w);
    } else if (w.free_slots > 0) {
      present.push_back(w.name);
    }
  }
  GangDecision d = Place(job.id, *job.spec, others);
  if (d.placed) {
    d.kept_off = present;
    return d;
  }
  d = Place(job.id, *job.spec, workers);
  if (d.placed) {
    for (const auto& w : present) {
      if (std::find(d.rank_workers.begin(), d.rank_workers.end(), w) != d.rank_workers.end()) {
        d.placed_on_avoided.push_back(w);
      }
    }
  }
  return d;
}

std::vector<GangDecision> GangScheduler::PlanQueue(const std::vector<QueuedJob>& queue,
                                                   std::vector<WorkerSnapshot> workers,
                                                   const std::vector<RunningJob>& running) {
  std::vector<GangDecision> out(queue.size());
  Pool pool;
  for (const auto& w : workers) pool[w.name] = w.free_slots;
  std::vector<Release> releases;
  for (const auto& r : running) {
    if (r.remaining) releases.push_back({std::max(*r.remaining, absl::ZeroDuration()), r.rank_workers, r.id});
  }
  Pool capacity = pool;  // every connected slot: free, running or placed in this pass
  for (const auto& r : running) Take(&capacity, r.rank_workers, -1);
  auto start_now = [&](size_t i, GangDecision d) {
    Take(&pool, d.rank_workers, +1);
    if (auto bound = Bound(*queue[i].spec)) releases.push_back({*bound, d.rank_workers, queue[i].id});
    out[i] = std::move(d);
  };

  // 1. In order while jobs fit.
  size_t head = 0;
  for (; head < queue.size(); ++head) {
    GangDecision d = PlaceQueued(queue[head], Snapshot(pool));
    if (!d.placed) {
      out[head] = std::move(d);
      break;
    }
    start_now(head, std::move(d));
  }
  if (head == queue.size()) return out;

  // 2. The head's reservation: when the estimated ends first free a placement for it.
  const QueuedJob& blocked = queue[head];
  GangDecision& head_decision = out[head];
  Simulation reservation = Simulate({&blocked}, pool, releases);
  const std::optional<absl::Duration> reserved_at = reservation.starts.at(0);
  Pool leftover_at_reservation = reservation.first_leftover;
  if (reserved_at) {
    head_decision.estimated_start = reserved_at;
    head_decision.reserved_workers = reservation.first_placement;
    absl::StrAppend(&head_decision.pending_reason, "; reserved to start ",
                    reservation.first_waits_for.empty()
                        ? std::string("now")
                        : absl::StrCat("when ", reservation.first_waits_for, " ends"));
  } else if (!workers.empty()) {
    const bool ever = PlaceQueued(blocked, Snapshot(capacity)).placed;
    absl::StrAppend(&head_decision.pending_reason,
                    ever ? "; no start estimate until the jobs it waits for report a step time "
                           "or declare job.time_limit_s"
                         : "; the connected workers are too few for it even when idle");
  }

  // 3. Backfill: a later job starts now only if it cannot delay the head.
  for (size_t i = head + 1; i < queue.size(); ++i) {
    GangDecision d = PlaceQueued(queue[i], Snapshot(pool));
    if (!reserved_at) {
      d.placed = false;
      d.pending_reason = absl::StrCat("queued behind ", blocked.id, ", whose start cannot be estimated");
      out[i] = std::move(d);
      continue;
    }
    if (!d.placed) {
      d.pending_reason = absl::StrCat("queued behind ", blocked.id, "; ", d.pending_reason);
      out[i] = std::move(d);
      continue;
    }
    const std::optional<absl::Duration> bound = Bound(*queue[i].spec);
    bool fits = bound && *bound <= *reserved_at;
    if (!fits) {
      // Still running at the reservation: it may take only slots the head leaves free.
      Pool after = leftover_at_reservation;
      Take(&after, d.rank_workers, +1);
      fits = std::all_of(after.begin(), after.end(), [](const auto& kv) { return kv.second >= 0; });
      if (fits) leftover_at_reservation = after;
    }
    if (!fits) {
      GangDecision wait;
      wait.job_id = queue[i].id;
      wait.pending_reason = absl::StrCat("queued behind ", blocked.id,
                                         "; starting now would delay its reservation");
      out[i] = std::move(wait);
      continue;
    }
    d.backfilled = true;
    start_now(i, std::move(d));
  }

  // 4. Every job still waiting: its start in a simulation of the queue in order.
  std::vector<const QueuedJob*> waiting;
  std::vector<size_t> index;
  for (size_t i = head; i < queue.size(); ++i) {
    if (out[i].placed) continue;
    waiting.push_back(&queue[i]);
    index.push_back(i);
  }
  Simulation rest = Simulate(waiting, pool, releases);
  for (size_t k = 0; k < waiting.size(); ++k) {
    if (index[k] == head) continue;  // the reservation above
    out[index[k]].estimated_start = rest.starts[k];
  }
  return out;
}

}  // namespace trainyard
