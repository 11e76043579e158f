#include "worker/engine/moe_layer.h"

namespace trainyard::engine {

MoEImpl::MoEImpl(const ModelConfig& c) {
  router = register_module("router", TokenChoiceRouter(c.dim, c.n_routed_experts, c.top_k,
                                                       c.score_func, c.route_norm, c.route_scale));
  experts = register_module("experts", GroupedExperts(c.dim, c.expert_hidden, c.n_routed_experts));
  if (c.n_shared_experts > 0) {
    shared_experts = register_module("shared_experts",
                                     FeedForward(c.dim, int64_t{c.expert_hidden} * c.n_shared_experts));
  }
  expert_bias = register_buffer("expert_bias", torch::zeros({c.n_routed_experts}));
}

MoEOutput MoEImpl::forward(const torch::Tensor& input) {
  const int64_t dim = input.size(-1);
  auto x = input.reshape({-1, dim});
  RoutingResult r = router(x, expert_bias);
  const int64_t top_k = r.experts.size(1);

  // Sort the (token, slot) pairs by expert so each expert sees one contiguous slice.
  // A stable sort keeps token order within an expert, so results are reproducible.
  auto flat_experts = r.experts.reshape({-1});
  auto order = std::get<1>(flat_experts.sort(/*stable=*/true, /*dim=*/0, /*descending=*/false));
  auto token_ids = order.div(top_k, "floor");
  auto routed_in = x.index_select(0, token_ids);
  auto gates = r.gates.reshape({-1}).index_select(0, order).unsqueeze(1);

  auto counts_cpu = r.tokens_per_expert.to(torch::kCPU).contiguous();
  std::vector<int64_t> counts(counts_cpu.data_ptr<int64_t>(),
                              counts_cpu.data_ptr<int64_t>() + counts_cpu.numel());
  auto routed_out = experts(routed_in, counts) * gates;
  auto out = torch::zeros_like(x).index_add(0, token_ids, routed_out);
  if (shared_experts) out = out + shared_experts(x);
  return {out.view(input.sizes()), r.tokens_per_expert};
}

void MoEImpl::UpdateExpertBias(const torch::Tensor& counts, double coeff) {
  torch::NoGradGuard no_grad;
  auto c = counts.to(expert_bias.options());
  expert_bias.add_(torch::sign(c.mean() - c), coeff);
  expert_bias.sub_(expert_bias.mean());
}

}  // namespace trainyard::engine
