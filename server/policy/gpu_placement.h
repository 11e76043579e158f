// The device side of placement, for GangScheduler and admission: what a job needs of a
// worker beyond slots (a GPU, an engine capability), how many ranks of it a worker can
// take, which GPUs a TP group gets, and the sentences about GPUs in pending reasons.
// Pure: plain values in, plain values out.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "trainyard/v1/spec.pb.h"

namespace trainyard {

struct WorkerSnapshot;

// One GPU a worker offers, as the controller accounts it.
struct GpuView {
  int index = 0;          // NVML index on its worker
  int nvlink_domain = 0;  // GpuDevice.nvlink_domain; 0: no NVLink peer or unknown
  bool healthy = true;    // false: taken out of service (ECC, XID, lost)
  bool held = false;      // a rank that has not ended holds it
  int64_t memory_bytes = 0;  // GpuDevice.memory_bytes; 0: not reported
};

// What a job needs of a worker besides slots.
struct DeviceNeeds {
  bool cuda = false;       // resources.device = "cuda": one free healthy GPU per rank
  bool cudagraph = false;  // compile.backend = "cudagraph"
  bool bf16 = false;       // training.mixed_precision = "bf16"
  // CUDA jobs: one rank's estimated memory (spec::EstimateRankMemory); a GPU that
  // reports less is not used for it. 0: not checked.
  int64_t rank_memory_bytes = 0;
};

// What `spec` needs, with rank_memory_bytes as given.
DeviceNeeds NeedsOf(const v1::JobSpec& spec, int64_t rank_memory_bytes = 0);

// Why `w` cannot run a job with `needs` at all (whatever is free), "" when it can:
// "cordoned", "no GPUs", "its engine is not built with CUDA", "its engine lacks cudagraph".
std::string WhatIsMissing(const WorkerSnapshot& w, const DeviceNeeds& needs);

// Free healthy GPUs of `w` with at least `min_memory` bytes (or unreported memory),
// lowest index first.
std::vector<GpuView> FreeGpus(const WorkerSnapshot& w, int64_t min_memory = 0);

// Ranks of a job with `needs` that `w` can take now: its free slots, and for CUDA jobs
// at most its free healthy GPUs. 0 when WhatIsMissing is not empty.
int RankCapacity(const WorkerSnapshot& w, const DeviceNeeds& needs);

// Takes `count` GPUs for one TP group out of `free` (free healthy GPUs of one worker,
// at least `count` of them) and returns their indices, ascending. With a known NVLink
// topology, when some NVLink domain (non-zero) has `count` free GPUs, the group takes
// the lowest ones of the domain with the fewest free GPUs that still fits (best fit,
// so larger domains stay whole for larger groups; ties: the lowest domain). Otherwise
// (no topology, tp = 1, or no domain has room) the lowest free indices.
std::vector<int> PickGpus(std::vector<GpuView>* free, int count, bool topology_known);

// "w1=0 (8 GPUs, 8 held)" for one worker: free healthy GPUs large enough for a rank of
// `min_memory` bytes, then what the rest are ("2 unhealthy", "3 smaller than the 90
// GiB a rank needs"); the free slots are named when they are fewer than the free GPUs.
std::string GpuFreeEntry(const WorkerSnapshot& w, int64_t min_memory = 0);

}  // namespace trainyard
