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
  // Returns [rows, dim] in the same order. One matmul chain per non-empty expert.
  // Each expert runs through `expert` (an expert_ffn region: params w1[e], w2[e], w3[e]),
  // or, when `expert_runs_eager` and the fused CPU kernels apply, all experts run as one
  // fused::GroupedExperts op (same math, no per-expert weight views or output cat).
  torch::Tensor forward(const torch::Tensor& x, const std::vector<int64_t>& counts, const RegionCall& expert,
                        bool expert_runs_eager);

  torch::Tensor w1, w2, w3;
};
TORCH_MODULE(GroupedExperts);

}  // namespace trainyard::engine
