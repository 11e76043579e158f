// What this engine build can run: `trainyard-rank --capabilities` prints it as one line
// of proto3 JSON of trainyard.v1.EngineCapabilities (proto/trainyard/v1/device.proto,
// .proto field names, every field printed), which the worker reads once at start and
// sends in its Register, so the controller places a job only where its engine runs it.
// The values are compile-time facts of the build (base/torch_compat.h): the LibTorch
// version, CUDA and its version, NCCL; bf16 and cudagraph are false in every build
// (no bf16 path exists yet; compile/compile_context.cc refuses cudagraph). What is
// reported false is refused at config time, by the same functions, so the report and
// the refusals cannot disagree.
#pragma once

#include <string>

#include "trainyard/v1/device.pb.h"
#include "worker/engine/config/engine_config.h"

namespace trainyard::engine {

// training.mixed_precision = "bf16" runs (issue 27 builds the path).
inline constexpr bool kHasBf16Path = false;
// compile.backend = "cudagraph" runs (CompileContext refuses it in every build).
inline constexpr bool kHasCudaGraphBackend = false;

v1::EngineCapabilities BuildCapabilities();

// The line `trainyard-rank --capabilities` prints (without the newline).
std::string CapabilitiesJson();

// Throws std::invalid_argument when `config` asks for something this build reports
// false: "config: training.mixed_precision=bf16: this engine has no bf16 path yet
// (trainyard-rank --capabilities reports bf16=false)", and likewise for
// compile.backend=cudagraph. trainyard-train and trainyard-bench call it before any
// rank starts (exit 2), the rank right after loading its config (exit 87: the job's
// input, which no retry fixes).
void RequireSupported(const EngineConfig& config);

}  // namespace trainyard::engine
