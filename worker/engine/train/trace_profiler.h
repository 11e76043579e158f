// The scheduled profiler's recorder: LibTorch's kineto profiler (the one behind
// torch.profiler), started before a profiled window's first step and stopped after its
// last. It records, on the training thread and the threads that inherit its profiler
// state (intra-op workers, autograd): every ATen operator (`cpu_op`), the engine's own
// ranges as `user_annotation` ("region:KIND#L", "compile", "collective:GROUP:OP#SEQ",
// "trainyard::data", "trainyard::optimizer", ...), and on a CUDA device the kernels,
// memcpys and memsets the GPU ran (CUPTI), each linked to the operator that launched it.
// Stop returns kineto's Chrome trace JSON ({"traceEvents": [...], ...} with
// "distributedInfo" naming the rank), which Perfetto, chrome://tracing and TensorBoard's
// profiler plugin open.
//
// Thread contract: one profile at a time per process; Start and Stop from the same
// thread (the training thread).
#pragma once

#include <string>

#include <c10/core/Device.h>

namespace trainyard::engine {

class TraceProfiler {
 public:
  // Starts recording CPU operators, plus the GPU's activity when `device` is CUDA.
  // Throws std::logic_error when a profile is already running.
  static void Start(const c10::Device& device = c10::Device(c10::DeviceType::CPU));
  static bool Running();
  // Stops and returns the trace as text; `rank`, `world_size` and `backend` ("gloo",
  // "nccl") go into its "distributedInfo". Writes kineto's output through a temporary
  // file in `scratch_dir` (removed), since kineto saves only to a path.
  static std::string Stop(int rank, int world_size, const std::string& backend, const std::string& scratch_dir);

  // "trace-a1-r0-s00000012.json": attempt, rank and the window's first step.
  static std::string TraceName(int attempt, int rank, long long first_step);
};

}  // namespace trainyard::engine
