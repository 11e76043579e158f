#include "worker/engine/model/moe/grouped_experts.h"

#include "worker/engine/kernels/cpu/fused_cpu_kernels.h"

namespace trainyard::engine {

GroupedExpertsImpl::GroupedExpertsImpl(int64_t dim, int64_t hidden, int64_t n_experts) {
  w1 = register_parameter("w1", torch::empty({n_experts, hidden, dim}));
  w2 = register_parameter("w2", torch::empty({n_experts, dim, hidden}));
  w3 = register_parameter("w3", torch::empty({n_experts, hidden, dim}));
}

torch::Tensor GroupedExpertsImpl::forward(const torch::Tensor& x, const std::vector<int64_t>& counts,
                                          const RegionCall& expert, bool grouped) {
  TORCH_CHECK(static_cast<int64_t>(counts.size()) == w1.size(0), "GroupedExperts: got ",
              counts.size(), " counts for ", w1.size(0), " experts");
  int64_t rows = 0;
  for (int64_t c : counts) rows += c;
  TORCH_CHECK(rows == x.size(0), "GroupedExperts: counts sum to ", rows, " but x has ",
              x.size(0), " rows");
  if (grouped) return expert({x, fused::ExpertStarts(counts)}, {w1, w2, w3})[0];
  std::vector<torch::Tensor> outs;
  outs.reserve(counts.size());
  // One unbind per weight instead of w[i] per expert: select's backward would build a
  // full-size zero gradient per expert and sum them; unbind's backward stacks once.
  const auto w1s = w1.unbind(0), w2s = w2.unbind(0), w3s = w3.unbind(0);
  // One split instead of a narrow per expert: narrow's backward allocates a zero
  // gradient the size of x per expert and sums them; split's backward is one cat.
  const auto pieces = x.split_with_sizes(counts, 0);
  for (size_t e = 0; e < counts.size(); ++e) {
    if (counts[e] == 0) continue;
    const auto& xs = pieces[e];
    outs.push_back(expert({xs}, {w1s[e], w2s[e], w3s[e]})[0]);
  }
  // Keep an empty result attached to x's graph: under expert parallelism the backward
  // all-to-all behind x must run on every rank, even one whose experts got no rows.
  if (outs.empty()) return x.narrow(0, 0, 0) * 0;
  return outs.size() == 1 ? outs[0] : torch::cat(outs, 0);
}

namespace regions {

compile::RegionFn GroupedExpertFfn() {
  return [](const std::vector<torch::Tensor>& in, const std::vector<torch::Tensor>& p) -> std::vector<torch::Tensor> {
    return {fused::GroupedExpertsAtStarts(in[0], in[1], p[0], p[1], p[2])};
  };
}

}  // namespace regions
}  // namespace trainyard::engine
