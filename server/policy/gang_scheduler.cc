#include "server/policy/gang_scheduler.h"

#include <algorithm>
#include <map>

#include "absl/strings/str_cat.h"
#include "common/base/text.h"

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

// Free slots and GPUs by worker name, for simulations.
using Pool = std::map<std::string, WorkerSnapshot>;

std::vector<WorkerSnapshot> Snapshot(const Pool& pool) {
  std::vector<WorkerSnapshot> out;
  for (const auto& [name, w] : pool) out.push_back(w);
  return out;
}

// Takes (sign +1) or gives back (-1) the slot of each rank in `rank_workers` and its GPU
// in `rank_gpus` (same order; empty or -1: none). False when that over-commits the pool:
// a slot count below zero or a GPU taken twice.
bool Take(Pool* pool, const std::vector<std::string>& rank_workers, const std::vector<int>& rank_gpus, int sign) {
  bool ok = true;
  for (size_t i = 0; i < rank_workers.size(); ++i) {
    auto it = pool->find(rank_workers[i]);
    if (it == pool->end()) continue;  // a disconnected worker's slots never return
    WorkerSnapshot& w = it->second;
    w.free_slots -= sign;
    if (w.free_slots < 0) ok = false;
    const int gpu = i < rank_gpus.size() ? rank_gpus[i] : -1;
    if (gpu < 0) continue;
    for (auto& g : w.gpus) {
      if (g.index != gpu) continue;
      if (sign > 0 && g.held) ok = false;
      g.held = sign > 0;
    }
  }
  return ok;
}

struct Release {
  absl::Duration at;
  std::vector<std::string> rank_workers;
  std::string job_id;
  std::vector<int> rank_gpus;
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
        Take(&pool, d.rank_workers, d.rank_gpus, +1);
        if (j == 0) {
          sim.first_placement = d.rank_workers;
          sim.first_leftover = pool;
          sim.first_waits_for = last_freed_by;
        }
        if (auto bound = Bound(*jobs[j]->spec)) {
          Release r{now + *bound, d.rank_workers, jobs[j]->id, d.rank_gpus};
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
      Take(&pool, releases[next].rank_workers, releases[next].rank_gpus, -1);
      last_freed_by = releases[next].job_id;
      ++next;
    }
  }
  return sim;
}

}  // namespace

GangDecision GangScheduler::Place(const std::string& job_id, const v1::JobSpec& spec,
                                  const std::vector<WorkerSnapshot>& workers, int64_t rank_memory_bytes) {
  GangDecision decision;
  decision.job_id = job_id;
  const int tp = spec.parallelism().tp();
  const int dp = spec.parallelism().dp();
  const int world = dp * tp;
  const int per_worker_cap = spec.resources().ranks_per_worker();  // 0: no cap
  const DeviceNeeds needs = NeedsOf(spec, rank_memory_bytes);
  const std::string wanted = Counted(world, needs.cuda ? "GPU" : "slot");  // "needs 1 slot"

  if (workers.empty()) {
    decision.pending_reason = absl::StrCat("needs ", wanted, "; no workers connected");
    return decision;
  }
  // Workers that can run it at all; most capacity first, so a gang lands on as few
  // workers as possible; name breaks ties so the decision is deterministic.
  std::vector<const WorkerSnapshot*> order;
  std::string not_eligible;
  int excluded = 0;
  for (const auto& w : workers) {
    if (std::string missing = WhatIsMissing(w, needs); !missing.empty()) {
      if (excluded++ < 8) absl::StrAppend(&not_eligible, excluded == 1 ? "" : "; ", w.name, ": ", missing);
      continue;
    }
    order.push_back(&w);
  }
  if (excluded > 8) absl::StrAppend(&not_eligible, "; and ", excluded - 8, " more");
  if (order.empty()) {
    decision.pending_reason =
        absl::StrCat("needs ", wanted, workers.size() == 1 ? "; the one connected worker cannot run it ("
                                                           : absl::StrCat("; none of the ", workers.size(),
                                                                          " connected workers can run it ("),
                     not_eligible, ")");
    return decision;
  }
  auto capacity = [&](const WorkerSnapshot* w) {
    const int c = RankCapacity(*w, needs);
    return per_worker_cap > 0 ? std::min(c, per_worker_cap) : c;
  };
  std::sort(order.begin(), order.end(), [&](const WorkerSnapshot* a, const WorkerSnapshot* b) {
    const int ca = RankCapacity(*a, needs), cb = RankCapacity(*b, needs);
    if (ca != cb) return ca > cb;
    return a->name < b->name;
  });

  int total_free = 0;
  int blocks_available = 0;
  for (const auto* w : order) {
    total_free += RankCapacity(*w, needs);
    blocks_available += capacity(w) / tp;
  }
  if (blocks_available < dp) {
    decision.pending_reason = absl::StrCat("needs ", wanted);
    if (tp > 1) absl::StrAppend(&decision.pending_reason, " with TP=", tp, " inside one worker");
    if (per_worker_cap > 0) absl::StrAppend(&decision.pending_reason, ", at most ", per_worker_cap, " per worker");
    if (needs.cuda) {
      absl::StrAppend(&decision.pending_reason, "; free GPUs: ");
      for (size_t i = 0; i < order.size() && i < 8; ++i) {
        absl::StrAppend(&decision.pending_reason, i == 0 ? "" : ", ", GpuFreeEntry(*order[i], needs.rank_memory_bytes));
      }
      if (order.size() > 8) absl::StrAppend(&decision.pending_reason, " and ", order.size() - 8, " more");
    } else {
      absl::StrAppend(&decision.pending_reason, "; ", total_free, " free: ", FreeList(order));
    }
    if (excluded > 0) absl::StrAppend(&decision.pending_reason, "; not eligible: ", not_eligible);
    return decision;
  }
  decision.rank_workers.reserve(world);
  decision.rank_gpus.reserve(world);
  int blocks_left = dp;
  for (const auto* w : order) {
    std::vector<GpuView> free_gpus = FreeGpus(*w, needs.rank_memory_bytes);
    for (int b = capacity(w) / tp; b > 0 && blocks_left > 0; --b, --blocks_left) {
      std::vector<int> gpus = needs.cuda ? PickGpus(&free_gpus, tp, w->nvlink_topology_known)
                                         : std::vector<int>(tp, -1);
      for (int t = 0; t < tp; ++t) {
        decision.rank_workers.push_back(w->name);
        decision.rank_gpus.push_back(gpus[t]);
      }
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
  if (job.avoid.empty()) return Place(job.id, *job.spec, workers, job.rank_memory_bytes);
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
  GangDecision d = Place(job.id, *job.spec, others, job.rank_memory_bytes);
  if (d.placed) {
    d.kept_off = present;
    return d;
  }
  d = Place(job.id, *job.spec, workers, job.rank_memory_bytes);
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
  for (const auto& w : workers) pool[w.name] = w;
  std::vector<Release> releases;
  for (const auto& r : running) {
    if (r.remaining) {
      releases.push_back({std::max(*r.remaining, absl::ZeroDuration()), r.rank_workers, r.id, r.rank_gpus});
    }
  }
  Pool capacity = pool;  // every connected slot and GPU: free, running or placed in this pass
  for (const auto& r : running) Take(&capacity, r.rank_workers, r.rank_gpus, -1);
  auto start_now = [&](size_t i, GangDecision d) {
    Take(&pool, d.rank_workers, d.rank_gpus, +1);
    if (auto bound = Bound(*queue[i].spec)) releases.push_back({*bound, d.rank_workers, queue[i].id, d.rank_gpus});
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
      fits = Take(&after, d.rank_workers, d.rank_gpus, +1) &&
             std::all_of(after.begin(), after.end(), [](const auto& kv) { return kv.second.free_slots >= 0; });
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
