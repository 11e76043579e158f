// Token-choice top-k router. Scores are sigmoid or softmax of a bias-free gate; the
// choice of experts uses scores + expert_bias (aux-loss-free balancing), the gate
// weights use the unbiased scores. Pure function of its inputs: it writes no state,
// so recompute (activation checkpointing) can never double-count.
#pragma once

#include <string>

#include <torch/torch.h>

namespace trainyard::engine {

struct RoutingResult {
  torch::Tensor gates;              // [tokens, top_k] float, carries autograd
  torch::Tensor experts;            // [tokens, top_k] int64
  torch::Tensor tokens_per_expert;  // [n_experts] int64
};

class TokenChoiceRouterImpl : public torch::nn::Module {
 public:
  TokenChoiceRouterImpl(int64_t dim, int64_t n_experts, int64_t top_k,
                        std::string score_func, bool route_norm, double route_scale);

  // x: [tokens, dim]; expert_bias: [n_experts], no grad.
  RoutingResult forward(const torch::Tensor& x, const torch::Tensor& expert_bias);

  torch::nn::Linear gate{nullptr};

 private:
  int64_t n_experts_;
  int64_t top_k_;
  std::string score_func_;
  bool route_norm_;
  double route_scale_;
};
TORCH_MODULE(TokenChoiceRouter);

}  // namespace trainyard::engine
