// One compiled cache entry of the jit backend: the region traced into a TorchScript
// graph whose inputs are the region's inputs then params, and the one GraphExecutor
// that runs it for the entry's whole life (an executor keeps its optimised plans, so
// it is never recreated). Autograd flows through the executor. Not thread-safe; owned
// by a RegionCache.
#pragma once

#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/runtime/graph_executor.h>
#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "worker/engine/compile/backend/compile_options.h"
#include "worker/engine/compile/region/region_fn.h"

namespace trainyard::engine::compile {

class JitExecutable {
 public:
  struct Traced {
    std::unique_ptr<JitExecutable> executable;
    // The outputs of the traced call itself: the tracer runs `fn` eagerly once, so
    // these are eager results with autograd history, and the caller returns them
    // rather than running `fn` (and any side effect in it) a second time.
    std::vector<torch::Tensor> outputs;
  };

  // Traces `fn` on (inputs, params) and builds the executor's plan. kAuto resolves to
  // kSimple when the first tensor is on the CPU, kProfiling otherwise. Throws what
  // the tracer throws (c10::Error), e.g. when `fn` reads a tensor that requires grad
  // without receiving it.
  static Traced Trace(const RegionFn& fn, const std::vector<torch::Tensor>& inputs,
                      const std::vector<torch::Tensor>& params, const std::string& name, JitExecutorMode mode);

  std::vector<torch::Tensor> Run(const std::vector<torch::Tensor>& inputs, const std::vector<torch::Tensor>& params);

  // Tensors the trace baked into the graph as constants: tensors `fn` read without
  // receiving them. Compared by identity against the model's state by the caller.
  std::vector<torch::Tensor> ConstantTensors() const;

  JitExecutorMode mode() const { return mode_; }
  const torch::jit::Graph& graph() const { return *graph_; }

  // Turns the TorchScript CPU fuser off unless NNC has its LLVM backend (Debian's CPU
  // LibTorch has none, and the fuser then fails at run time with "LLVM Backend not
  // found"). Process-wide; idempotent. Returns whether LLVM codegen is available.
  static bool ConfigureCpuFusion();

 private:
  JitExecutable(std::shared_ptr<torch::jit::Graph> graph, const std::string& name, JitExecutorMode mode);

  std::shared_ptr<torch::jit::Graph> graph_;
  JitExecutorMode mode_;
  torch::jit::GraphExecutor executor_;
};

}  // namespace trainyard::engine::compile
