#include "worker/engine/compile/activation_checkpoint.h"

#include <torch/csrc/autograd/custom_function.h>

namespace trainyard::engine::compile {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Carries fn from forward to backward through the context's saved_data.
struct FnHolder : torch::CustomClassHolder {
  explicit FnHolder(CheckpointFn f) : fn(std::move(f)) {}
  CheckpointFn fn;
};

struct CheckpointFunction : torch::autograd::Function<CheckpointFunction> {
  // `inputs` must arrive as a TensorList: autograd::Function only treats Tensor and
  // TensorList arguments as differentiable inputs (a std::vector records nothing).
  // Function::apply runs this under no-grad, so fn keeps no activations.
  static variable_list forward(AutogradContext* ctx, const CheckpointFn& fn, at::TensorList inputs) {
    ctx->save_for_backward(inputs.vec());
    // Outputs the loss does not use get no gradient rather than zeros, so they drop
    // out of the recompute's grad() and their inputs get no gradient from them.
    ctx->set_materialize_grads(false);
    ctx->saved_data["fn"] = c10::IValue::make_capsule(c10::make_intrusive<FnHolder>(fn));
    variable_list out = fn(inputs.vec());
    // Integer outputs (token counts) cannot carry gradients.
    for (const auto& t : out) {
      if (t.defined() && !at::isFloatingType(t.scalar_type())) ctx->mark_non_differentiable({t});
    }
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const variable_list saved = ctx->get_saved_variables();
    const auto holder = c10::static_intrusive_pointer_cast<FnHolder>(ctx->saved_data["fn"].toCapsule());
    // One gradient per forward argument: slot 0 is fn (none), inputs follow.
    variable_list grads(1 + saved.size());
    variable_list detached, wrt;
    std::vector<size_t> wrt_index;
    for (size_t i = 0; i < saved.size(); ++i) {
      torch::Tensor d = saved[i].detach();
      if (ctx->needs_input_grad(i)) {  // indexed over tensor inputs only
        d.requires_grad_(true);
        wrt.push_back(d);
        wrt_index.push_back(i);
      }
      detached.push_back(std::move(d));
    }
    // No early return when no input needs a gradient: parameters used inside fn may.
    variable_list outputs;
    {
      torch::AutoGradMode enable(true);  // backward runs with grad mode off
      outputs = holder->fn(detached);
    }
    variable_list differentiable, grad_in;
    for (size_t j = 0; j < outputs.size() && j < grad_outputs.size(); ++j) {
      if (outputs[j].requires_grad() && grad_outputs[j].defined()) {
        differentiable.push_back(outputs[j]);
        grad_in.push_back(grad_outputs[j]);
      }
    }
    if (differentiable.empty()) return grads;
    // A plain backward through the recomputed graph, not autograd::grad over the
    // inputs: parameters fn uses without receiving them (a module's weights) accumulate
    // their gradients into .grad exactly as the un-checkpointed backward would, and the
    // detached inputs (leaves) collect theirs for the outer graph.
    torch::autograd::backward(differentiable, grad_in, /*retain_graph=*/false, /*create_graph=*/false);
    for (size_t k = 0; k < wrt_index.size(); ++k) grads[1 + wrt_index[k]] = wrt[k].grad();
    return grads;
  }
};

}  // namespace

std::vector<torch::Tensor> Checkpointed(const CheckpointFn& fn, const std::vector<torch::Tensor>& inputs) {
  if (!c10::GradMode::is_enabled()) return fn(inputs);
  return CheckpointFunction::apply(fn, at::TensorList(inputs));
}

}  // namespace trainyard::engine::compile
