#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "trainyard/v1/spec.pb.h"

namespace trainyard {

// Free capacity of one connected worker, as the controller accounts it.
struct WorkerSnapshot {
  std::string name;
  int free_slots = 0;
};

struct QueuedJob {
  std::string id;
  const v1::JobSpec* spec = nullptr;  // normalised
  int64_t order = 0;  // FIFO position: lower was submitted first
};

// For one job: either the worker of every global rank, or why it must wait.
struct GangDecision {
  std::string job_id;
  bool placed = false;
  std::vector<std::string> rank_workers;  // index = global rank
  std::string pending_reason;
};

// Pure queue-order and placement policy: no I/O, no locks, no clock. Ranks are
// numbered dp-major (rank = d·tp + t), so a TP group is tp consecutive ranks and must
// sit inside one worker; DP (and EP, which is carved from dp×tp) may span workers. A
// gang starts whole or not at all.
class GangScheduler {
 public:
  // Places one job against `workers` (not modified).
  static GangDecision Place(const std::string& job_id, const v1::JobSpec& spec,
                            const std::vector<WorkerSnapshot>& workers);

  // Sorts `queue` into scheduling order: higher spec.job.priority first, then lower
  // `order` (FIFO).
  static void OrderQueue(std::vector<QueuedJob>* queue);

  // Walks `queue` in order (already sorted by OrderQueue), placing each job and
  // consuming capacity. Strict order: once a job cannot start, the ones behind it wait
  // too, so a large job is never starved by a stream of small ones.
  static std::vector<GangDecision> PlaceQueue(const std::vector<QueuedJob>& queue,
                                              std::vector<WorkerSnapshot> workers);
};

}  // namespace trainyard
