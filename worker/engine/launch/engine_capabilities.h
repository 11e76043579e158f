// What this engine build can run: `trainyard-rank --capabilities` prints it as one line
// of proto3 JSON of trainyard.v1.EngineCapabilities (proto/trainyard/v1/device.proto,
// .proto field names, every field printed), which the worker reads once at start and
// sends in its Register, so the controller places a job only where its engine runs it.
// The values are compile-time facts of the build (base/torch_compat.h): the LibTorch
// version, CUDA and its version, NCCL; bf16 is true in every build (fp32 weights, bf16
// compute, on CPU and CUDA), cudagraph false (compile/compile_context.cc refuses it). What is
// reported false is refused at config time, by the same functions, so the report and
// the refusals cannot disagree.
#pragma once

#include <string>

#include "trainyard/v1/device.pb.h"
#include "worker/engine/config/engine_config.h"

namespace trainyard::engine {

// training.mixed_precision = "bf16" runs (fp32 weights, bf16 compute: the policy is in
// model/regions/projection.h). Every build has it, CPU and CUDA.
inline constexpr bool kHasBf16Path = true;
// compile.backend = "cudagraph" runs (CompileContext refuses it in every build).
inline constexpr bool kHasCudaGraphBackend = false;

v1::EngineCapabilities BuildCapabilities();

// The line `trainyard-rank --capabilities` prints (without the newline).
std::string CapabilitiesJson();

// Throws std::invalid_argument when `config` asks for something this build reports
// false: compile.backend=cudagraph ("config: compile.backend=cudagraph: this engine has
// no cudagraph backend ..."). trainyard-train and trainyard-bench call it before any
// rank starts (exit 2), the rank right after loading its config (exit 87: the job's
// input, which no retry fixes).
void RequireSupported(const EngineConfig& config);

}  // namespace trainyard::engine
