#include "worker/engine/moe_layer.h"

#include "worker/engine/parallel_autograd.h"

namespace trainyard::engine {

MoEImpl::MoEImpl(const ModelConfig& c, ParallelContext ctx)
    : ctx_(ctx), dispatcher_(c.n_routed_experts, ctx.ep_group) {
  router = register_module("router", TokenChoiceRouter(c.dim, c.n_routed_experts, c.top_k,
                                                       c.score_func, c.route_norm, c.route_scale));
  experts = register_module("experts", GroupedExperts(c.dim, c.expert_hidden, dispatcher_.n_local_experts()));
  if (c.n_shared_experts > 0) {
    shared_experts = register_module(
        "shared_experts", FeedForward(c.dim, int64_t{c.expert_hidden} * c.n_shared_experts, ctx));
  }
  expert_bias = register_buffer("expert_bias", torch::zeros({c.n_routed_experts}));
}

MoEOutput MoEImpl::forward(const torch::Tensor& input) {
  const int64_t dim = input.size(-1);
  auto x = CopyToRegion(input.reshape({-1, dim}), ctx_.tp_group);
  const int64_t n = x.size(0);
  const int64_t begin = n * ctx_.tp_rank / ctx_.tp, end = n * (ctx_.tp_rank + 1) / ctx_.tp;
  auto xs = ctx_.tp > 1 ? x.narrow(0, begin, end - begin) : x;

  RoutingResult r = router(xs, expert_bias);
  const int64_t top_k = r.experts.size(1);
  // Sort the (token, slot) pairs by expert so each expert sees one contiguous slice.
  // A stable sort keeps token order within an expert, so results are reproducible.
  auto flat_experts = r.experts.reshape({-1});
  auto order = std::get<1>(flat_experts.sort(/*stable=*/true, /*dim=*/0, /*descending=*/false));
  auto token_ids = order.div(top_k, "floor");
  auto routed_in = xs.index_select(0, token_ids);
  auto gates = r.gates.reshape({-1}).index_select(0, order).unsqueeze(1);

  Dispatched d = dispatcher_.Dispatch(routed_in, r.tokens_per_expert);
  auto expert_out = experts(d.tokens, d.plan.local_counts);
  auto routed_out = dispatcher_.Combine(expert_out, d.plan) * gates;
  auto out = torch::zeros_like(xs).index_add(0, token_ids, routed_out);
  if (ctx_.tp > 1) {
    // Zero rows for the other TP ranks' slices: the all-reduce below fills them in.
    out = torch::cat({xs.new_zeros({begin, dim}), out, xs.new_zeros({n - end, dim})}, 0);
  }
  if (shared_experts) out = out + shared_experts->Partial(x);
  out = ReduceFromRegion(out, ctx_.tp_group);
  return {out.view(input.sizes()), r.tokens_per_expert};
}

void MoEImpl::UpdateExpertBias(const torch::Tensor& counts, double coeff) {
  torch::NoGradGuard no_grad;
  auto c = counts.to(expert_bias.options());
  expert_bias.add_(torch::sign(c.mean() - c), coeff);
  expert_bias.sub_(expert_bias.mean());
}

}  // namespace trainyard::engine
