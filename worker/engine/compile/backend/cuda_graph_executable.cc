#include "worker/engine/compile/backend/cuda_graph_executable.h"

#include <stdexcept>
#include <utility>

namespace trainyard::engine::compile {
namespace {

using torch::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

bool Differentiable(const Tensor& t) { return t.defined() && t.is_floating_point(); }

// Held by the autograd node of one replay: when the node goes, with or without its
// backward having run (a validation forward, an output that never reached the loss),
// the forward it belongs to stops blocking the next one.
struct ForwardToken final : torch::CustomClassHolder {
  ForwardToken(CudaGraphExecutable* executable, uint64_t generation) : executable(executable), generation(generation) {}
  ~ForwardToken() override { executable->EndForward(generation); }
  CudaGraphExecutable* executable;
  uint64_t generation;
};

// The autograd node of one replay. The executable outlives every graph it appears in
// (its CompiledRegion lives as long as the model), so the token keeps a plain pointer.
struct GraphedRegion : public torch::autograd::Function<GraphedRegion> {
  static variable_list forward(AutogradContext* ctx, int64_t executable, at::TensorList inputs_and_params) {
    auto* self = reinterpret_cast<CudaGraphExecutable*>(executable);
    variable_list out = self->ReplayForward(inputs_and_params);
    ctx->saved_data["token"] = at::IValue::make_capsule(c10::make_intrusive<ForwardToken>(self, self->BeginForward()));
    // Only the outputs the backward graph differentiates carry a gradient, as in eager.
    for (size_t o = 0; o < out.size(); ++o) {
      if (!self->CarriesGradient(o)) ctx->mark_non_differentiable({out[o]});
    }
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    TORCH_CHECK(!c10::GradMode::is_enabled(),
                "cudagraph: a captured region's backward is a replayed graph and cannot itself be differentiated "
                "(create_graph=True); use compile.backend=jit");
    auto token = c10::static_intrusive_pointer_cast<ForwardToken>(ctx->saved_data["token"].toCapsule());
    variable_list out = token->executable->ReplayBackward(grads, token->generation);
    out.insert(out.begin(), Tensor());  // the executable argument
    return out;
  }
};

}  // namespace

std::unique_ptr<CudaGraphExecutable> CudaGraphExecutable::Capture(const RegionFn& fn, const std::vector<Tensor>& inputs,
                                                                  const std::vector<Tensor>& params, bool grad_mode,
                                                                  const GraphCaptureFactory& captures) {
  std::unique_ptr<CudaGraphExecutable> self(new CudaGraphExecutable());
  c10::Device device(c10::DeviceType::CPU);
  bool have_device = false;
  self->n_inputs_ = inputs.size();
  {
    torch::NoGradGuard no_grad;
    for (const Tensor& t : inputs) {
      Tensor copy = t.defined() ? t.detach().clone() : Tensor();
      self->static_inputs_.push_back(copy);
      if (t.defined() && !have_device) {
        device = t.device();
        have_device = true;
      }
    }
    for (const Tensor& p : params) {
      self->static_params_.push_back(p.defined() ? p.detach() : Tensor());
      self->param_ptrs_.push_back(p.defined() ? p.data_ptr() : nullptr);
      if (p.defined() && !have_device) {
        device = p.device();
        have_device = true;
      }
    }
  }
  if (grad_mode) {
    for (size_t i = 0; i < inputs.size() + params.size(); ++i) {
      const Tensor& original = i < inputs.size() ? inputs[i] : params[i - inputs.size()];
      Tensor& captured = i < inputs.size() ? self->static_inputs_[i] : self->static_params_[i - inputs.size()];
      if (!Differentiable(original) || !original.requires_grad()) continue;
      captured.requires_grad_(true);
      self->grad_targets_.push_back(i);
      self->targets_.push_back(captured);
    }
  }
  const bool with_backward = !self->targets_.empty();

  self->forward_ = captures(device, nullptr);
  for (int run = 0; run < kWarmupRuns; ++run) {
    self->forward_->Warmup([raw = self.get(), &fn, grad_mode, with_backward] {
      torch::AutoGradMode mode(grad_mode);
      std::vector<Tensor> out = fn(raw->static_inputs_, raw->static_params_);
      if (!with_backward) return;
      std::vector<size_t> carried;
      std::vector<Tensor> ones;
      for (size_t o = 0; o < out.size(); ++o) {
        if (Differentiable(out[o]) && out[o].requires_grad()) {
          carried.push_back(o);
          ones.push_back(torch::ones_like(out[o]));
        }
      }
      raw->grad_outputs_ = carried;
      if (!carried.empty()) raw->Differentiate(out, ones);
    });
  }

  // The bodies keep what they use by value or through the executable: a rerun capture
  // runs them again on every replay. live_outputs_ are the outputs with the autograd
  // graph the backward body differentiates (on CUDA the captured ones themselves).
  self->static_outputs_ = self->forward_->Capture([raw = self.get(), fn, grad_mode] {
    torch::AutoGradMode mode(grad_mode);
    raw->live_outputs_ = fn(raw->static_inputs_, raw->static_params_);
    return raw->live_outputs_;
  });
  self->carries_.assign(self->static_outputs_.size(), false);
  if (with_backward && !self->grad_outputs_.empty()) {
    torch::NoGradGuard no_grad;
    for (size_t o : self->grad_outputs_) {
      self->static_output_grads_.push_back(torch::empty_like(self->static_outputs_[o]));
      self->carries_[o] = true;
    }
    // The backward graph reads the forward graph's intermediates, so it allocates from
    // the same pool.
    self->backward_ = captures(device, self->forward_.get());
    self->static_grads_ = self->backward_->Capture(
        [raw = self.get()] { return raw->Differentiate(raw->live_outputs_, raw->static_output_grads_); });
  }
  if (!self->backward_) {
    self->grad_targets_.clear();
    self->carries_.assign(self->static_outputs_.size(), false);
  }
  return self;
}

std::vector<Tensor> CudaGraphExecutable::Differentiate(const std::vector<Tensor>& outputs,
                                                       const std::vector<Tensor>& output_grads) {
  std::vector<Tensor> carried;
  for (size_t o : grad_outputs_) carried.push_back(outputs[o]);
  return torch::autograd::grad(carried, targets_, output_grads, /*retain_graph=*/false, /*create_graph=*/false,
                               /*allow_unused=*/true);
}

void CudaGraphExecutable::CopyInputs(at::TensorList inputs_and_params) {
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < n_inputs_; ++i) {
    if (static_inputs_[i].defined()) static_inputs_[i].detach().copy_(inputs_and_params[i]);
  }
  for (size_t k = 0; k < static_params_.size(); ++k) {
    const Tensor& p = inputs_and_params[n_inputs_ + k];
    if (p.defined() && p.data_ptr() != param_ptrs_[k]) {
      throw std::runtime_error(
          "cudagraph: param " + std::to_string(k) +
          " of this region lives in other memory than when its graph was captured (FSDP re-gathers weights "
          "into new memory every step, which a captured graph cannot follow; use compile.backend=jit with "
          "parallelism.dp_shard > 1)");
    }
  }
}

std::optional<std::vector<Tensor>> CudaGraphExecutable::Run(const std::vector<Tensor>& inputs,
                                                            const std::vector<Tensor>& params) {
  if (backward_pending_) return std::nullopt;
  std::vector<Tensor> all(inputs);
  all.insert(all.end(), params.begin(), params.end());
  if (!backward_ || !c10::GradMode::is_enabled()) {
    return ReplayForward(all);
  }
  return GraphedRegion::apply(reinterpret_cast<int64_t>(this), at::TensorList(all));
}

std::vector<Tensor> CudaGraphExecutable::ReplayForward(at::TensorList inputs_and_params) {
  CopyInputs(inputs_and_params);
  forward_->Replay();
  std::vector<Tensor> out;
  out.reserve(static_outputs_.size());
  for (const Tensor& o : static_outputs_) out.push_back(o.detach());
  return out;
}

uint64_t CudaGraphExecutable::BeginForward() {
  backward_pending_ = true;
  return ++generation_;
}

void CudaGraphExecutable::EndForward(uint64_t generation) {
  if (generation == generation_) backward_pending_ = false;
}

std::vector<Tensor> CudaGraphExecutable::ReplayBackward(const std::vector<Tensor>& output_grads, uint64_t generation) {
  // A second backward through a retained graph after another forward would read that
  // forward's activations.
  TORCH_CHECK(generation == generation_ && backward_pending_,
              "cudagraph: this region's graph has run forward again since the forward being differentiated "
              "(a retained graph differentiated twice); use compile.backend=jit");
  {
    torch::NoGradGuard no_grad;
    for (size_t k = 0; k < grad_outputs_.size(); ++k) {
      const Tensor& g = output_grads[grad_outputs_[k]];
      if (g.defined()) {
        static_output_grads_[k].copy_(g);
      } else {
        static_output_grads_[k].zero_();
      }
    }
  }
  backward_->Replay();
  EndForward(generation);
  std::vector<Tensor> grads(n_inputs_ + static_params_.size());
  for (size_t k = 0; k < grad_targets_.size(); ++k) {
    // Copies: whatever keeps a gradient (AccumulateGrad, the engine's input buffers)
    // must not hold the graph's memory, which the next backward replay rewrites.
    if (static_grads_[k].defined()) grads[grad_targets_[k]] = static_grads_[k].clone();
  }
  return grads;
}

}  // namespace trainyard::engine::compile
