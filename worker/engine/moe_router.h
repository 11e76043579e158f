// Token-choice top-k router parameters: a bias-free gate whose sigmoid or softmax
// scores choose experts (with expert_bias added, aux-loss-free balancing) and weight
// them (unbiased). The routing itself is the `router` region (model_regions.h): a pure
// function, so recompute (activation checkpointing) can never double-count.
// Not thread-safe (a torch module).
#pragma once

#include <torch/torch.h>

namespace trainyard::engine {

class TokenChoiceRouterImpl : public torch::nn::Module {
 public:
  TokenChoiceRouterImpl(int64_t dim, int64_t n_experts);

  torch::nn::Linear gate{nullptr};
};
TORCH_MODULE(TokenChoiceRouter);

}  // namespace trainyard::engine
