#include "worker/engine/compile/backend/jit_executable.h"

#include <torch/csrc/jit/codegen/fuser/interface.h>
#include <torch/csrc/jit/frontend/tracer.h>
#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/tensorexpr/codegen.h>

#include <stdexcept>
#include <utility>

namespace trainyard::engine::compile {
namespace {

JitExecutorMode Resolve(JitExecutorMode mode, const std::vector<torch::Tensor>& inputs,
                        const std::vector<torch::Tensor>& params) {
  if (mode != JitExecutorMode::kAuto) return mode;
  const torch::Tensor* first = !inputs.empty() ? &inputs.front() : !params.empty() ? &params.front() : nullptr;
  return first != nullptr && !first->device().is_cpu() ? JitExecutorMode::kProfiling : JitExecutorMode::kSimple;
}

torch::jit::Stack ToStack(const std::vector<torch::Tensor>& inputs, const std::vector<torch::Tensor>& params) {
  torch::jit::Stack stack;
  stack.reserve(inputs.size() + params.size());
  stack.insert(stack.end(), inputs.begin(), inputs.end());
  stack.insert(stack.end(), params.begin(), params.end());
  return stack;
}

void CollectConstants(const torch::jit::Block& block, std::vector<torch::Tensor>& out) {
  for (const torch::jit::Node* node : block.nodes()) {
    if (node->kind() == torch::jit::prim::Constant) {
      c10::optional<c10::IValue> value = torch::jit::toIValue(node->output());
      if (value && value->isTensor()) out.push_back(value->toTensor());
    }
    for (const torch::jit::Block* sub : node->blocks()) CollectConstants(*sub, out);
  }
}

}  // namespace

JitExecutable::JitExecutable(std::shared_ptr<torch::jit::Graph> graph, const std::string& name, JitExecutorMode mode)
    : graph_(std::move(graph)),
      mode_(mode),
      executor_(graph_, name,
                mode == JitExecutorMode::kSimple ? torch::jit::ExecutorExecutionMode::SIMPLE
                                                 : torch::jit::ExecutorExecutionMode::PROFILING) {}

JitExecutable::Traced JitExecutable::Trace(const RegionFn& fn, const std::vector<torch::Tensor>& inputs,
                                           const std::vector<torch::Tensor>& params, const std::string& name,
                                           JitExecutorMode mode) {
  const size_t n_inputs = inputs.size();
  // The tracer hands back the graph-input versions of the tensors (the same tensors,
  // or views where one tensor is passed twice); fn must compute from those.
  auto traced_fn = [&](torch::jit::Stack stack) -> torch::jit::Stack {
    std::vector<torch::Tensor> in, pa;
    in.reserve(n_inputs);
    pa.reserve(stack.size() - n_inputs);
    for (size_t i = 0; i < stack.size(); ++i) (i < n_inputs ? in : pa).push_back(stack[i].toTensor());
    std::vector<torch::Tensor> out = fn(in, pa);
    for (size_t i = 0; i < out.size(); ++i) {
      if (!out[i].defined()) {
        throw std::invalid_argument("region " + name + ": output " + std::to_string(i) +
                                    " is undefined; a region returns defined tensors only");
      }
    }
    return torch::jit::Stack(out.begin(), out.end());
  };
  auto [state, out_stack] = torch::jit::tracer::trace(
      ToStack(inputs, params), traced_fn, [](const torch::autograd::Variable&) { return std::string(); },
      /*strict=*/false, /*force_outplace=*/false);

  const JitExecutorMode resolved = Resolve(mode, inputs, params);
  std::unique_ptr<JitExecutable> exe(new JitExecutable(state->graph, name, resolved));
  // Build the plan now, so its cost is part of compile_ms rather than of the first hit
  // (SIMPLE does all its work here; PROFILING only instruments, and optimises after
  // its profiling runs).
  torch::jit::Stack plan_stack = ToStack(inputs, params);
  exe->executor_.getPlanFor(plan_stack);

  Traced traced;
  traced.executable = std::move(exe);
  traced.outputs.reserve(out_stack.size());
  for (auto& v : out_stack) traced.outputs.push_back(std::move(v).toTensor());
  return traced;
}

std::vector<torch::Tensor> JitExecutable::Run(const std::vector<torch::Tensor>& inputs,
                                              const std::vector<torch::Tensor>& params) {
  torch::jit::Stack stack = ToStack(inputs, params);
  executor_.run(stack);
  std::vector<torch::Tensor> out;
  out.reserve(stack.size());
  for (auto& v : stack) out.push_back(std::move(v).toTensor());
  return out;
}

std::vector<torch::Tensor> JitExecutable::ConstantTensors() const {
  std::vector<torch::Tensor> out;
  CollectConstants(*graph_->block(), out);
  return out;
}

bool JitExecutable::ConfigureCpuFusion() {
  static const bool has_llvm = [] {
    bool llvm = true;
    try {
      torch::jit::tensorexpr::RegisterCodeGenList::GetInstance().FindStmtFactoryMethod("llvm_codegen");
    } catch (const std::exception&) {
      llvm = false;
    }
    if (!llvm) torch::jit::overrideCanFuseOnCPU(false);
    return llvm;
  }();
  return has_llvm;
}

}  // namespace trainyard::engine::compile
