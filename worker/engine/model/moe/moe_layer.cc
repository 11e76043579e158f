#include "worker/engine/model/moe/moe_layer.h"

#include "worker/engine/kernels/ops.h"
#include "worker/engine/parallel/parallel_autograd.h"

namespace trainyard::engine {

MoEImpl::MoEImpl(const ModelConfig& c, ParallelContext ctx, RegionFactory& regions, int layer, bool plant_side_effect,
                 bool in_block_regions)
    : ctx_(ctx),
      dispatcher_(c.n_routed_experts, ctx.ep_group),
      regions_(&regions),
      // Under an eager factory the expert region is a plain call, not a reported region.
      expert_factory_(regions.RunsEager() ? &EagerRegionFactory() : &regions),
      expert_key_(regions::FfnKey("expert_ffn", c.dim, c.expert_hidden, /*tp=*/1)),
      layer_(layer),
      top_k_(c.top_k),
      n_experts_(c.n_routed_experts),
      capacity_factor_(c.capacity_factor) {
  RegionFactory& own = in_block_regions ? EagerRegionFactory() : regions;
  router = register_module("router", TokenChoiceRouter(c.dim, c.n_routed_experts));
  experts = register_module("experts", GroupedExperts(c.dim, c.expert_hidden, dispatcher_.n_local_experts()));
  if (c.n_shared_experts > 0) {
    shared_experts = register_module("shared_experts", FeedForward(c.dim, int64_t{c.expert_hidden} * c.n_shared_experts,
                                                                   ctx, own, layer, "shared_expert"));
  }
  expert_bias = register_buffer("expert_bias", torch::zeros({c.n_routed_experts}));
  if (plant_side_effect) {
    tokens_per_expert = register_buffer("tokens_per_expert", torch::zeros({c.n_routed_experts}, torch::kInt64));
  }
  const auto router_key = regions::RouterKey(c.dim, c.n_routed_experts, c.top_k, c.score_func, c.route_norm,
                                             c.route_scale, c.capacity_factor, c.n_expert_groups, c.n_limited_groups);
  router_fn_ = regions::Router(c.top_k, c.score_func, c.route_norm, c.route_scale, tokens_per_expert, c.capacity_factor,
                               c.n_expert_groups, c.n_limited_groups);
  router_region_ = own.Make(router_key, router_fn_, layer);
  // Rows per expert change every step: the rows dimension is dynamic, so a dropless MoE
  // compiles its experts once rather than once per token count. The expert region (one
  // trainyard::grouped_experts call for all local experts) is made at the first forward.
  const auto combine_key = regions::CombineKey(c.dim, c.top_k);
  combine_region_ = own.Make(combine_key, regions::Combine(), layer);
  regions.GraphBreak(router_key,
                     "MoE dispatch: per-expert token counts are read on the host (.tolist) to size the expert "
                     "slices (data-dependent shapes)");
  if (ctx.ep > 1) {
    // (The expert region's own break is reported when that region is made, so the
    // event names its layers.)
    regions.GraphBreak(combine_key, "EP reverse all-to-all of expert outputs (collective)");
  }
  if (ctx.tp > 1) regions.GraphBreak(combine_key, "TP all-reduce of routed + shared expert output (collective)");
}

MoEOutput MoEImpl::forward(const torch::Tensor& input) {
  const int64_t dim = input.size(-1);
  auto x = CopyToRegion(input.reshape({-1, dim}), ctx_.tp_group);
  const int64_t n = x.size(0);
  const int64_t begin = n * ctx_.tp_rank / ctx_.tp, end = n * (ctx_.tp_rank + 1) / ctx_.tp;
  auto xs = ctx_.tp > 1 ? x.narrow(0, begin, end - begin) : x;

  // rows sorted by expert, their gates and token ids, tokens per expert (and, with a
  // capacity, the kept rows per expert).
  torch::Tensor router_x = xs;
  const int64_t s = input.dim() >= 3 ? input.size(-2) : n;
  if (regions::CapacityCanDrop(s, top_k_, n_experts_, capacity_factor_)) {
    // Capacity counts per sequence, so a TP rank's slice must hold whole sequences.
    TORCH_CHECK(begin % s == 0 && end % s == 0, "model.capacity_factor with parallelism.tp=", ctx_.tp,
                ": every TP rank routes whole sequences, so the ", n / s,
                " sequences of a micro-batch must split evenly over the TP ranks");
    router_x = xs.view({-1, s, dim});
  }
  const auto routed = router_region_({router_x, expert_bias}, {router->gate->weight});
  const bool capped = routed.size() > 4;
  auto out = combine_region_({RunExperts(routed[0], capped ? routed[4] : routed[3]), routed[1], routed[2], xs}, {})[0];
  if (ctx_.tp > 1) {
    // Zero rows for the other TP ranks' slices: the all-reduce below fills them in.
    out = torch::cat({xs.new_zeros({begin, dim}), out, xs.new_zeros({n - end, dim})}, 0);
  }
  if (shared_experts) out = out + shared_experts->Partial(x);
  out = ReduceFromRegion(out, ctx_.tp_group);
  return {out.view(input.sizes()), routed[3], capped ? routed[3].sum() - routed[4].sum() : torch::Tensor()};
}

torch::Tensor MoEImpl::RunExperts(const torch::Tensor& rows, const torch::Tensor& counts) {
  Dispatched d = dispatcher_.Dispatch(rows, counts);
  if (!expert_region_) {
    expert_region_ = expert_factory_->Make(expert_key_, regions::GroupedExpertFfn(), layer_, /*dynamic=*/{{0, 0}});
    if (ctx_.ep > 1) {
      regions_->GraphBreak(expert_key_, "EP all-to-all of per-expert counts and of token rows (collective)");
    }
  }
  auto out = dispatcher_.Combine(experts->forward(d.tokens, d.plan.local_counts, expert_region_), d.plan);
  // Rows dropped by the capacity were not dispatched: zero output, zero gradient.
  if (out.size(0) < rows.size(0)) out = torch::cat({out, out.new_zeros({rows.size(0) - out.size(0), out.size(1)})});
  return out;
}

void MoEImpl::UpdateExpertBias(const torch::Tensor& counts, double coeff) {
  torch::NoGradGuard no_grad;
  auto c = counts.to(expert_bias.options());
  expert_bias.add_(torch::sign(c.mean() - c), coeff);
  expert_bias.sub_(expert_bias.mean());
}

namespace regions {

using compile::RegionFn;
using compile::RegionKey;
using torch::Tensor;

RegionKey CombineKey(int64_t dim, int64_t top_k) { return RegionKey("combine", {{"dim", dim}, {"top_k", top_k}}); }

RegionFn Combine() {
  return [](const std::vector<Tensor>& in, const std::vector<Tensor>&) -> std::vector<Tensor> {
    return {ops::Combine(in[0], in[1], in[2], in[3].size(0))};
  };
}

}  // namespace regions
}  // namespace trainyard::engine
