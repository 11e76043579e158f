// What `trainyard preflight` and `trainyard explain` print of a job's memory per rank:
// spec::EstimateRankMemory (common/spec/memory_estimate.h; docs/memory.md) at the peak,
// by part. Pure functions over the resolved spec; nothing here talks to a controller.
#pragma once

#include <string>
#include <vector>

#include "common/spec/job_spec.h"
#include "trainyard/v1/job_service.pb.h"
#include "trainyard/v1/spec.pb.h"

namespace trainyard::cli {

// The estimate as text, a headline then one line a part, 12-column labels as `explain`:
//   memory:     407 MiB per rank at its peak, the loss's backward (estimate, docs/memory.md)
//               dp=1 dp_shard=1 tp=1 ep=1 activation_checkpoint.mode=none training.mixed_precision=fp32
//     parameters     29.5 MiB  fp32 master weights, 7.74M of 7.74M parameters
//     gradients         0 B    fp32, of 29.5 MiB (those that exist at the peak)
//     ...
// With parallelism.dp_shard > 1 a third line gives the state kept between steps
// (MemoryEstimate::state_bytes), and parameters its shards plus the step's gathered copy.
// Ends with a newline.
std::string FormatMemoryEstimate(const spec::JobSpec& spec);
// The same for a stored or submitted proto spec; one "memory:     no estimate: WHY" line
// when the spec core refuses it.
std::string FormatMemoryEstimate(const v1::JobSpec& spec);

// One JSON line (no newline), what `preflight --json` writes to stderr:
//   {"memory_estimate":{"total_bytes":...,"peak_at":"...","layout":"...","total_params":...,
//    "rank_params":...,"parameters":...,"gradients":...,"all_gradients":...,"optimizer":...,
//    "compute_weights":...,"activations":...,"communication":...,"gradient_buckets":...,
//    "other":...,"fused_cpu_kernels":true,"dp_shard":1,"expert_shard":1,"shard_params":...,
//    "gathered_parameters":...,"state_bytes":...}}
// Bytes and counts as JSON numbers.
std::string MemoryEstimateJsonLine(const spec::JobSpec& spec);

// Whether one rank of `spec` (the full model, as submitted) fits the fleet's largest
// worker, as the controller's admission holds it: a CPU job against the connected
// worker with the most memory (WorkerInfo.memory_bytes), a CUDA job against the largest
// GPU of a connected worker whose engine has CUDA. `known` is false when no worker
// reported the figure. One line, 12-column label, e.g.
//   fleet:      the full model needs 232 GiB a rank, more than the largest worker has (w1: 23 GiB);
//               no layout of dp·tp=1 ranks fits (the smallest, ..., needs 61 GiB): submit would be refused
//   fleet:      the full model needs 407 MiB a rank; the largest worker has 23 GiB (w1): it fits
struct FleetFit {
  bool known = false;
  bool fits = false;
  std::string text;  // ends with a newline
};
FleetFit FitFleet(const spec::JobSpec& spec, const std::vector<v1::WorkerInfo>& workers);

}  // namespace trainyard::cli
