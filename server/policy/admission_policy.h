#pragma once

#include <vector>

#include "absl/status/statusor.h"
#include "server/policy/gang_scheduler.h"
#include "trainyard/v1/spec.pb.h"

namespace trainyard {

// One connected worker as admission sees it: its engine and its GPUs.
struct FleetWorker {
  std::string name;
  std::string libtorch_version;  // EngineCapabilities.libtorch_version; "" unknown
  bool cuda = false;       // engine capabilities
  bool cudagraph = false;
  bool bf16 = false;
  int gpus = 0;            // GPUs it offers (healthy or not)
  // Its largest GPU (GpuDevice.memory_bytes), its NVML index and name; 0: none reported.
  int64_t largest_gpu_memory_bytes = 0;
  int largest_gpu_index = -1;
  std::string largest_gpu_name;
};

// What admission may know about the fleet: plain values, taken by the caller.
struct FleetView {
  int connected_slots = 0;  // slots of every connected worker, free or not
  // Every connected worker with all of its slots (free or not): a job that could not
  // be placed even on this idle fleet would wait forever and, the queue being strict,
  // hold back every job behind it. Empty: only the slot total is checked.
  std::vector<WorkerSnapshot> idle_workers;
  // The connected worker with the most memory (Register.memory_bytes); 0: none reported.
  std::string largest_memory_worker;
  int64_t largest_memory_bytes = 0;
  // Every connected worker's engine and GPUs: what resources.device=cuda,
  // compile.backend=cudagraph and training.mixed_precision=bf16 are checked against.
  std::vector<FleetWorker> workers;
};

// Admission of a submitted job, in two layers:
//   1. the spec core (common/spec/): preset and defaults, then every rule a rank also
//      applies when it loads the job (spec_agreement_test checks the two agree on
//      10,000 random specs), so no job is admitted that every rank would refuse;
//   2. the fleet: the world size dp·tp must fit in the connected slots, and the gang
//      must be placeable on the idle fleet (a TP group inside one worker), one rank's
//      estimated peak memory (spec::EstimateRankMemory) must fit the largest worker
//      (host memory for CPU jobs, the largest GPU of the eligible workers for CUDA
//      jobs), else INVALID_ARGUMENT with the figure, its breakdown and a layout of the
//      same world size that fits (spec::SuggestLayout) or that none does;
//      resources.device=cuda needs a connected worker with GPUs and a CUDA engine,
//      compile.backend=cudagraph one whose engine has cudagraph, and
//      training.mixed_precision=bf16 one whose engine has bf16 (any device): refused
//      with FAILED_PRECONDITION naming the workers considered and what each lacks
//      (connecting such a worker makes the same spec admissible). A job placeable on the
//      idle eligible fleet but not now is admitted and waits PENDING.
// Pure: no I/O, no locks, no clock; the only place in server/ that applies spec
// defaults and validation.
class AdmissionPolicy {
 public:
  // The normalised spec, or the first error: INVALID_ARGUMENT naming the field and the
  // rule (including a world size larger than fleet.connected_slots), FAILED_PRECONDITION
  // for a device or engine capability no connected worker has, naming the field.
  static absl::StatusOr<v1::JobSpec> Admit(const v1::JobSpec& submitted, const FleetView& fleet);
};

}  // namespace trainyard
