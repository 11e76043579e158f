// One captured entry of the cudagraph backend, for one region call site and one guard
// set: the region's forward as one graph and, when it runs with autograd, its backward
// as a second graph (the scheme of PyTorch's make_graphed_callables). A replay copies the
// call's inputs into the graph's own input tensors, replays, and hands out the graph's
// outputs; autograd reaches the backward graph through one node, which copies the
// incoming gradients in, replays, and hands out copies of the gradients of the inputs
// and params (nothing that keeps a gradient may hold the graph's memory). The backward
// cannot itself be differentiated (create_graph), and a retained graph cannot be
// differentiated after another forward.
//
// Graphs are per call site, not per key: the forward graph's memory holds the
// activations its backward reads, so two layers sharing one graph would overwrite each
// other's. The params are read in place (the graph reads the parameters' own memory): a
// param whose storage moved since capture (FSDP re-gathering into new memory) is
// refused, never read stale. Regions are pure (region_fn.h) and draw no random numbers.
// Not thread-safe; owned by the CompiledRegion of its call site.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "worker/engine/compile/backend/graph_capture.h"
#include "worker/engine/compile/region/region_fn.h"

namespace trainyard::engine::compile {

class CudaGraphExecutable {
 public:
  // Eager runs of fn before capture (libraries initialise lazily, which must not
  // happen under capture).
  static constexpr int kWarmupRuns = 3;

  // Captures fn on copies of `inputs` and on `params` in place, with autograd when
  // `grad_mode` is on and some input or param requires grad. Throws what fn or the
  // capture throws.
  static std::unique_ptr<CudaGraphExecutable> Capture(const RegionFn& fn, const std::vector<torch::Tensor>& inputs,
                                                      const std::vector<torch::Tensor>& params, bool grad_mode,
                                                      const GraphCaptureFactory& captures);

  // The outputs for (inputs, params), which must pass the guards this entry was captured
  // under. They alias the graph's memory until this entry runs forward again.
  // nullopt when the backward of this entry's previous forward has not run yet (its
  // memory is still needed): the caller runs the region eagerly instead.
  // Throws std::runtime_error when a param's storage moved since capture.
  std::optional<std::vector<torch::Tensor>> Run(const std::vector<torch::Tensor>& inputs,
                                                const std::vector<torch::Tensor>& params);

  bool has_backward() const { return backward_ != nullptr; }

  // The autograd node's parts (cuda_graph_executable.cc). A grad-mode forward is open
  // from BeginForward until its backward replays or its node is released (EndForward);
  // while open, Run returns nullopt.
  std::vector<torch::Tensor> ReplayForward(at::TensorList inputs_and_params);
  uint64_t BeginForward();
  void EndForward(uint64_t generation);
  bool CarriesGradient(size_t output) const { return carries_[output]; }
  std::vector<torch::Tensor> ReplayBackward(const std::vector<torch::Tensor>& output_grads, uint64_t generation);

 private:
  CudaGraphExecutable() = default;
  void CopyInputs(at::TensorList inputs_and_params);
  // Gradients of the carried outputs (grad_outputs_) with respect to targets_.
  std::vector<torch::Tensor> Differentiate(const std::vector<torch::Tensor>& outputs,
                                           const std::vector<torch::Tensor>& output_grads);

  size_t n_inputs_ = 0;
  std::vector<torch::Tensor> static_inputs_;   // owned copies, requires_grad as at capture
  std::vector<torch::Tensor> static_params_;   // detached aliases of the params
  std::vector<const void*> param_ptrs_;        // their data at capture
  std::vector<torch::Tensor> static_outputs_;  // what the forward graph rewrites
  std::vector<torch::Tensor> live_outputs_;    // with the autograd graph the backward body uses
  std::vector<bool> carries_;                  // per output: differentiated by the backward graph
  // Of inputs then params: which the backward graph differentiates (grad_targets_[k] is
  // the index of static_grads_[k] in inputs then params).
  std::vector<size_t> grad_targets_;
  std::vector<torch::Tensor> targets_;  // the static inputs and params themselves
  std::vector<size_t> grad_outputs_;    // outputs that carry a gradient
  std::vector<torch::Tensor> static_output_grads_;
  std::vector<torch::Tensor> static_grads_;
  std::unique_ptr<GraphCapture> forward_;
  std::unique_ptr<GraphCapture> backward_;
  bool backward_pending_ = false;
  uint64_t generation_ = 0;  // of the last grad-mode forward
};

}  // namespace trainyard::engine::compile
