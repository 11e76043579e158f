// What this engine build can run: `trainyard-rank --capabilities` prints it as one line
// of proto3 JSON of trainyard.v1.EngineCapabilities (proto/trainyard/v1/device.proto,
// .proto field names, every field printed), which the worker reads once at start and
// sends in its Register, so the controller places a job only where its engine runs it.
// The values are compile-time facts of the build (base/torch_compat.h): the LibTorch
// version, CUDA and its version, NCCL; bf16 is true in every build (fp32 weights, bf16
// compute, on CPU and CUDA), cudagraph false until a GPU run proves the backend (see
// kCudaGraphProven), so the controller places no cudagraph job. The engine itself runs
// cudagraph where it can capture (a CUDA build with a visible GPU; trainyard-train,
// trainyard-bench and the GPU check ask for it directly).
#pragma once

#include <string>

#include "trainyard/v1/device.pb.h"
#include "worker/engine/config/engine_config.h"

namespace trainyard::engine {

// training.mixed_precision = "bf16" runs (fp32 weights, bf16 compute: the policy is in
// model/regions/projection.h). Every build has it, CPU and CUDA.
inline constexpr bool kHasBf16Path = true;
// The cudagraph backend (compile/backend/cuda_graph_executable.h) is built into every
// CUDA build, but no GPU has run it yet: the capability stays false, and the controller
// admits no cudagraph job, until deploy/gpu-check.sh's cudagraph check passes on a GPU.
inline constexpr bool kCudaGraphProven = false;

v1::EngineCapabilities BuildCapabilities();

// The line `trainyard-rank --capabilities` prints (without the newline).
std::string CapabilitiesJson();

// Throws std::invalid_argument when `config` asks for something this build cannot run:
// compile.backend=cudagraph in a CPU build ("config: compile.backend=cudagraph: this
// engine was built for CPU ..."). trainyard-train and trainyard-bench call it before any
// rank starts (exit 2), the rank right after loading its config (exit 87: the job's
// input, which no retry fixes). A CUDA build without a visible GPU refuses cudagraph
// when the trainer starts (CompileContext).
void RequireSupported(const EngineConfig& config);

}  // namespace trainyard::engine
