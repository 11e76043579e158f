// Dropless token-choice MoE: router, routed experts, optional shared expert, and the
// expert_bias buffer used for aux-loss-free balancing. Forward writes no module state:
// the per-expert token counts come back as a value and the trainer applies the bias
// update after the optimizer step. Not thread-safe (a torch module).
#pragma once

#include <torch/torch.h>

#include "worker/engine/dense_ffn.h"
#include "worker/engine/engine_config.h"
#include "worker/engine/grouped_experts.h"
#include "worker/engine/moe_router.h"

namespace trainyard::engine {

struct MoEOutput {
  torch::Tensor out;                // same shape as the input
  torch::Tensor tokens_per_expert;  // [n_experts] int64
};

class MoEImpl : public torch::nn::Module {
 public:
  explicit MoEImpl(const ModelConfig& config);

  // x: [..., dim].
  MoEOutput forward(const torch::Tensor& x);

  // expert_bias += coeff·sign(mean(c) − c), then re-centred to mean zero.
  // `counts` are this step's global tokens per expert.
  void UpdateExpertBias(const torch::Tensor& counts, double coeff);

  TokenChoiceRouter router{nullptr};
  GroupedExperts experts{nullptr};
  FeedForward shared_experts{nullptr};  // null when n_shared_experts == 0
  torch::Tensor expert_bias;            // buffer [n_experts]
};
TORCH_MODULE(MoE);

}  // namespace trainyard::engine
