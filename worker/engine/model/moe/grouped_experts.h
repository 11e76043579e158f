// The routed experts of one MoE layer as 3-D parameters (torchtitan layout):
// w1, w3: [E, H, D], w2: [E, D, H]; expert e computes w2[e]·(silu(w1[e]·x) ⊙ w3[e]·x).
// Not thread-safe (a torch module); owned by its MoE layer.
#pragma once

#include <torch/torch.h>

#include <vector>

#include "worker/engine/model/regions/region_factory.h"

namespace trainyard::engine {

class GroupedExpertsImpl : public torch::nn::Module {
 public:
  GroupedExpertsImpl(int64_t dim, int64_t hidden, int64_t n_experts);

  // x: [rows, dim] with rows sorted by expert; counts[e] rows belong to expert e.
  // Returns [rows, dim] in the same order. `expert` is the layer's expert_ffn region
  // (regions::GroupedExpertFfn), called once for all experts.
  torch::Tensor forward(const torch::Tensor& x, const std::vector<int64_t>& counts, const RegionCall& expert);

  torch::Tensor w1, w2, w3;
};
TORCH_MODULE(GroupedExperts);

namespace regions {

// The routed experts as one expert_ffn region: the trainyard::grouped_experts operator
// (the fused CPU kernel on fp32 CPU, at::_grouped_mm on bf16 CUDA, else one FFN per
// expert). inputs: rows [m, dim] (dimension 0 dynamic), start row of
// each expert (int64 [E]); params: w1, w2, w3 [E, ...]. output: [m, dim].
compile::RegionFn GroupedExpertFfn();

}  // namespace regions

}  // namespace trainyard::engine
