// The routed experts of one MoE layer as 3-D parameters (torchtitan layout):
// w1, w3: [E, H, D], w2: [E, D, H]; expert e computes w2[e]·(silu(w1[e]·x) ⊙ w3[e]·x).
// Not thread-safe (a torch module); owned by its MoE layer.
#pragma once

#include <vector>

#include <torch/torch.h>

#include "worker/engine/model/regions/region_factory.h"

namespace trainyard::engine {

class GroupedExpertsImpl : public torch::nn::Module {
 public:
  GroupedExpertsImpl(int64_t dim, int64_t hidden, int64_t n_experts);

  // x: [rows, dim] with rows sorted by expert; counts[e] rows belong to expert e.
  // Returns [rows, dim] in the same order. `expert` is the layer's expert_ffn region:
  // with `grouped`, one call for all experts (regions::GroupedExpertFfn: the
  // trainyard::grouped_experts operator, inputs x and the experts' start rows, params
  // w1, w2, w3); otherwise one call per non-empty expert (regions::Ffn, params w1[e],
  // w2[e], w3[e]).
  torch::Tensor forward(const torch::Tensor& x, const std::vector<int64_t>& counts, const RegionCall& expert,
                        bool grouped);

  torch::Tensor w1, w2, w3;
};
TORCH_MODULE(GroupedExperts);

namespace regions {

// The routed experts as one expert_ffn region where the fused CPU kernels apply.
// inputs: rows [m, dim] (dimension 0 dynamic), start row of each expert (int64 [E]);
// params: w1, w2, w3 [E, ...]. output: [m, dim].
compile::RegionFn GroupedExpertFfn();

}  // namespace regions

}  // namespace trainyard::engine
