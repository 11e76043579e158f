#include "worker/engine/moe_router.h"

#include <utility>

namespace trainyard::engine {

TokenChoiceRouterImpl::TokenChoiceRouterImpl(int64_t dim, int64_t n_experts, int64_t top_k,
                                             std::string score_func, bool route_norm,
                                             double route_scale)
    : n_experts_(n_experts),
      top_k_(top_k),
      score_func_(std::move(score_func)),
      route_norm_(route_norm),
      route_scale_(route_scale) {
  gate = register_module("gate", torch::nn::Linear(torch::nn::LinearOptions(dim, n_experts).bias(false)));
}

RoutingResult TokenChoiceRouterImpl::forward(const torch::Tensor& x, const torch::Tensor& expert_bias) {
  auto logits = gate(x);
  auto scores = score_func_ == "softmax" ? torch::softmax(logits, -1) : torch::sigmoid(logits);
  torch::Tensor selected;
  {
    // Selection is discrete; keep the bias out of the autograd graph.
    torch::NoGradGuard no_grad;
    selected = std::get<1>(torch::topk(scores.detach() + expert_bias, top_k_, /*dim=*/-1));
  }
  auto gates = scores.gather(1, selected);
  if (route_norm_ && top_k_ > 1) gates = gates / (gates.sum(-1, /*keepdim=*/true) + 1e-20);
  if (route_scale_ != 1.0) gates = gates * route_scale_;
  auto counts = torch::bincount(selected.reshape({-1}), /*weights=*/{}, /*minlength=*/n_experts_);
  return {gates, selected, counts};
}

}  // namespace trainyard::engine
