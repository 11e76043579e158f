// What a CompileContext is configured with. Plain values; parsing from the job's
// strings throws std::invalid_argument naming the allowed values.
#pragma once

#include <functional>
#include <string>

#include "worker/engine/compile/backend/graph_capture.h"

namespace trainyard::engine::compile {

enum class CompileBackend {
  kEager,      // regions call their function directly; no cache
  kJit,        // TorchScript trace + GraphExecutor, one executor per cache entry
  kCudaGraph,  // CUDA graphs per call site (cuda_graph_executable.h); dynamic-dim keys run jit
};

// What a region that writes state it did not receive does to the run.
enum class SideEffectPolicy {
  kError,     // throw (std::runtime_error naming the region and the tensor)
  kFallback,  // the region key runs eager from then on, with an event
};

// Which GraphExecutor runs a jit entry.
//   kSimple:    no graph optimisation; autograd per op as in eager, so gradients are
//               bit-identical to eager and nothing pauses after the compile.
//   kProfiling: profiles, then builds differentiable graphs and fuses (NNC). Worth it
//               only where NNC can generate code: CUDA. Debian's CPU LibTorch has no
//               LLVM, so on CPU it only adds a one-off backward optimisation (~0.3 s
//               per entry), ~1e-7 relative gradient drift and no speed-up: in
//               bench/guard_bench.cc an RMSNorm+SwiGLU step runs at eager speed with
//               kSimple and 10-20% slower with kProfiling.
//   kAuto:      kSimple for entries whose first tensor is on the CPU, kProfiling
//               otherwise.
enum class JitExecutorMode { kAuto, kSimple, kProfiling };

struct CompileOptions {
  CompileBackend backend = CompileBackend::kJit;
  // Entries per region key before new guard sets run eager.
  int recompile_limit = 8;
  SideEffectPolicy on_side_effect = SideEffectPolicy::kError;
  JitExecutorMode jit_executor = JitExecutorMode::kAuto;
  // How the cudagraph backend captures; empty: CUDA graphs (CudaGraphCaptures). Tests
  // inject RerunCaptures to run the backend's autograd plumbing on CPU.
  GraphCaptureFactory graph_captures;
  // Monotonic clock in milliseconds, for compile_ms. Tests inject a fake.
  std::function<double()> now_ms;
};

CompileBackend ParseCompileBackend(const std::string& name);      // eager | jit | cudagraph
SideEffectPolicy ParseSideEffectPolicy(const std::string& name);  // error | fallback
const char* CompileBackendName(CompileBackend backend);
const char* SideEffectPolicyName(SideEffectPolicy policy);

}  // namespace trainyard::engine::compile
