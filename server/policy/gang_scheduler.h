#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "server/policy/gpu_placement.h"
#include "trainyard/v1/spec.pb.h"

namespace trainyard {

// Free capacity of one connected worker, as the controller accounts it, and what it can
// run. A CPU job takes slots only; a CUDA job (resources.device = "cuda") takes one slot
// and one free healthy GPU per rank, on workers whose engine reports CUDA.
struct WorkerSnapshot {
  WorkerSnapshot() = default;
  WorkerSnapshot(std::string worker, int free) : name(std::move(worker)), free_slots(free) {}
  std::string name;
  int free_slots = 0;
  std::vector<GpuView> gpus;  // every GPU it offers; empty: a CPU worker
  bool nvlink_topology_known = false;  // GpuView.nvlink_domain was read, not assumed
  // Its engine's capabilities (trainyard-rank --capabilities).
  bool engine_cuda = false;
  bool engine_cudagraph = false;
  bool engine_bf16 = false;
  // Cordoned (CordonWorker, DrainWorker): takes no new ranks. Its free slots are what
  // they are; placement (WhatIsMissing: "cordoned") and preemption leave it out.
  bool cordoned = false;
};

struct QueuedJob {
  std::string id;
  const v1::JobSpec* spec = nullptr;  // normalised
  int64_t order = 0;  // FIFO position: lower was submitted first
  // Workers this job's attempts failed on repeatedly: it is placed without them when
  // it can be, else on them (GangDecision says which).
  std::vector<std::string> avoid;
  // CUDA jobs: one rank's estimated memory; GPUs reporting less are not used for it.
  int64_t rank_memory_bytes = 0;
};

// A job holding slots now, and how long until it gives them back: estimated from its
// remaining steps and measured step time, bounded by its job.time_limit_s; nullopt
// when neither is known yet (then its slots are never counted as coming back).
struct RunningJob {
  std::string id;
  std::vector<std::string> rank_workers;  // the worker of each rank it holds
  std::optional<absl::Duration> remaining;
  std::vector<int> rank_gpus;  // the GPU of each of rank_workers (-1: none); empty: none at all
};

// For one job: either the worker of every global rank, or why it must wait.
struct GangDecision {
  std::string job_id;
  bool placed = false;
  bool backfilled = false;  // placed ahead of a blocked job without delaying it
  std::vector<std::string> rank_workers;  // index = global rank
  // Placed jobs: the NVML index of each rank's GPU on its worker (index = global rank);
  // -1 for every rank of a CPU job.
  std::vector<int> rank_gpus;
  std::string pending_reason;
  // Unplaced jobs: the estimated time from now until it starts (nullopt: cannot be
  // estimated, because a job it waits for has no time limit and no measured step time,
  // or the fleet is too small). Placed jobs: zero.
  std::optional<absl::Duration> estimated_start;
  // The queue's head when it cannot start: the slots reserved for it at its estimated
  // start (the worker of each rank). Backfilled jobs never take them.
  std::vector<std::string> reserved_workers;
  // Placed jobs with QueuedJob::avoid: the avoided workers it was kept off, or (when no
  // placement without them exists) the avoided workers it was placed on anyway.
  std::vector<std::string> kept_off;
  std::vector<std::string> placed_on_avoided;
};

// Pure queue-order and placement policy: no I/O, no locks, no clock. Ranks are
// numbered dp-major (rank = d·tp + t), so a TP group is tp consecutive ranks and must
// sit inside one worker; DP (and EP, which is carved from dp×tp) may span workers. A
// gang starts whole or not at all. A CUDA job's capacity on a worker is
// min(free slots, free healthy GPUs), and each TP group gets its GPUs by PickGpus (one
// NVLink domain when the topology is known and a domain has room). Workers that cannot
// run a job at all (WhatIsMissing: no GPUs, an engine without CUDA, cudagraph or bf16)
// are left out, and its pending reason names them.
class GangScheduler {
 public:
  // Places one job against `workers` (not modified). The pending reason is a sentence
  // about the fleet: "needs 4 slots with TP=2 inside one worker; 2 free: w1=1, w2=1", or
  // for CUDA jobs "needs 4 GPUs with TP=4 inside one worker; free GPUs: w1=0 (8 GPUs,
  // 8 held)".
  // `rank_memory_bytes` (CUDA jobs, 0: unchecked): GPUs reporting less memory are not
  // used.
  static GangDecision Place(const std::string& job_id, const v1::JobSpec& spec,
                            const std::vector<WorkerSnapshot>& workers, int64_t rank_memory_bytes = 0);

  // Sorts `queue` into scheduling order: higher spec.job.priority first, then lower
  // `order` (FIFO).
  static void OrderQueue(std::vector<QueuedJob>* queue);

  // Place for a queued job: first without its avoided workers, then with them.
  static GangDecision PlaceQueued(const QueuedJob& job, const std::vector<WorkerSnapshot>& workers);

  // EASY backfill over `queue` (sorted by OrderQueue): jobs start in order while they
  // fit. The first that does not (the head) gets a reservation: the earliest time the
  // running jobs' estimated ends free a placement for it, and that placement. A later
  // job may then start now only if it does not delay the head: it ends (by its
  // job.time_limit_s) before the reservation, or it takes none of the reserved slots.
  // When the head's start cannot be estimated nothing passes it, so a large job is
  // never starved. Every unplaced job gets an estimated start from a simulation of the
  // queue in order over the estimated ends.
  static std::vector<GangDecision> PlanQueue(const std::vector<QueuedJob>& queue,
                                             std::vector<WorkerSnapshot> workers,
                                             const std::vector<RunningJob>& running = {});
};

}  // namespace trainyard
