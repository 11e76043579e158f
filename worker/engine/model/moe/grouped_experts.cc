#include "worker/engine/model/moe/grouped_experts.h"

#include "worker/engine/kernels/ops.h"

namespace trainyard::engine {

GroupedExpertsImpl::GroupedExpertsImpl(int64_t dim, int64_t hidden, int64_t n_experts) {
  w1 = register_parameter("w1", torch::empty({n_experts, hidden, dim}));
  w2 = register_parameter("w2", torch::empty({n_experts, dim, hidden}));
  w3 = register_parameter("w3", torch::empty({n_experts, hidden, dim}));
}

torch::Tensor GroupedExpertsImpl::forward(const torch::Tensor& x, const std::vector<int64_t>& counts,
                                          const RegionCall& expert) {
  TORCH_CHECK(static_cast<int64_t>(counts.size()) == w1.size(0), "GroupedExperts: got ", counts.size(), " counts for ",
              w1.size(0), " experts");
  // With no rows at all the result is still [0, dim] attached to x's graph: under expert
  // parallelism the backward all-to-all behind x must run on every rank.
  return expert({x, ops::ExpertStarts(counts, x.size(0))}, {w1, w2, w3})[0];
}

namespace regions {

compile::RegionFn GroupedExpertFfn() {
  return [](const std::vector<torch::Tensor>& in, const std::vector<torch::Tensor>& p) -> std::vector<torch::Tensor> {
    return {ops::GroupedExpertsAtStarts(in[0], in[1], p[0], p[1], p[2])};
  };
}

}  // namespace regions
}  // namespace trainyard::engine
