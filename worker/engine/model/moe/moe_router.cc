#include "worker/engine/model/moe/moe_router.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "worker/engine/model/regions/projection.h"

namespace trainyard::engine {

TokenChoiceRouterImpl::TokenChoiceRouterImpl(int64_t dim, int64_t n_experts) {
  gate = register_module("gate", torch::nn::Linear(torch::nn::LinearOptions(dim, n_experts).bias(false)));
}

namespace regions {

using compile::RegionFn;
using compile::RegionKey;
using torch::Tensor;

RegionKey RouterKey(int64_t dim, int64_t n_experts, int64_t top_k, const std::string& score_func, bool route_norm,
                    double route_scale, double capacity_factor, int64_t n_groups, int64_t limited_groups) {
  std::vector<RegionKey::Field> fields{{"dim", dim},
                                       {"n_experts", n_experts},
                                       {"top_k", top_k},
                                       {"score_func", score_func},
                                       {"route_norm", route_norm},
                                       {"route_scale", route_scale}};
  // Only when set, so a dropless router keeps its key (and its cache entries).
  if (capacity_factor > 0) fields.emplace_back("capacity_factor", capacity_factor);
  if (n_groups > 1) fields.insert(fields.end(), {{"n_groups", n_groups}, {"limited_groups", limited_groups}});
  return RegionKey("router", fields);
}

int64_t ExpertCapacity(int64_t s, int64_t top_k, int64_t n_experts, double capacity_factor) {
  const double c =
      std::ceil(static_cast<double>(s) * static_cast<double>(top_k) / static_cast<double>(n_experts) * capacity_factor);
  return c >= static_cast<double>(s) ? s : std::max<int64_t>(1, static_cast<int64_t>(c));
}

bool CapacityCanDrop(int64_t s, int64_t top_k, int64_t n_experts, double capacity_factor) {
  return capacity_factor > 0 && ExpertCapacity(s, top_k, n_experts, capacity_factor) < s;
}

Tensor LimitToBestGroups(const Tensor& choice, int64_t n_groups, int64_t limited_groups) {
  if (n_groups <= 1) return choice;
  const int64_t n_experts = choice.size(-1);
  auto grouped = choice.view({-1, n_groups, n_experts / n_groups});
  // A group's score: the sum of its two best experts (DeepSeek-V3's, torchtitan's and
  // HF's rule).
  auto group_scores = std::get<0>(grouped.topk(2, /*dim=*/-1)).sum(-1);
  auto best = std::get<1>(group_scores.topk(limited_groups, /*dim=*/-1));
  // A float mask: the jit backend traces scatter with a number, not a bool, as its value.
  auto kept = torch::zeros_like(group_scores).scatter(1, best, 1.0);
  return grouped.masked_fill(kept.eq(0).unsqueeze(-1), -std::numeric_limits<double>::infinity()).view({-1, n_experts});
}

RegionFn Router(int64_t top_k, std::string score_func, bool route_norm, double route_scale, Tensor plant_into,
                double capacity_factor, int64_t n_groups, int64_t limited_groups) {
  return [=](const std::vector<Tensor>& in, const std::vector<Tensor>& p) -> std::vector<Tensor> {
    const bool capped = capacity_factor > 0 && in[0].dim() == 3;
    const Tensor x = capped ? in[0].reshape({-1, in[0].size(-1)}) : in[0];
    const Tensor& expert_bias = in[1];
    // bf16: the gate's GEMM in bf16, the scores (and so the gates) in fp32, as
    // torchtitan's router does.
    auto logits = Project(x, {p[0]});
    if (IsReducedPrecision(logits)) logits = logits.to(torch::kFloat);
    auto scores = score_func == "softmax" ? torch::softmax(logits, -1) : torch::sigmoid(logits);
    // Selection is discrete: the bias steers it but gets no gradient.
    auto choice = LimitToBestGroups(scores.detach() + expert_bias, n_groups, limited_groups);
    auto selected = std::get<1>(torch::topk(choice, top_k, /*dim=*/-1));
    auto gates = scores.gather(1, selected);
    if (route_norm && top_k > 1) gates = gates / (gates.sum(-1, /*keepdim=*/true) + 1e-20);
    if (route_scale != 1.0) gates = gates * route_scale;
    // A scatter, not bincount: bincount sizes its output from the largest id, which on
    // CUDA is a host synchronisation.
    const auto flat = selected.reshape({-1});
    auto counts = torch::zeros({expert_bias.size(0)}, flat.options()).scatter_add_(0, flat, torch::ones_like(flat));
    if (plant_into.defined()) plant_into.copy_(counts);  // test-only planted side effect
    if (capped) {
      const int64_t groups = in[0].size(0), s = in[0].size(1), n_experts = expert_bias.size(0);
      const int64_t capacity = ExpertCapacity(s, top_k, n_experts, capacity_factor);
      // Per group and expert, the `capacity` routed assignments with the highest gates
      // stay; an unrouted entry (-1) ranks below every routed one (gates are >= 0).
      auto ranked = torch::full({x.size(0), n_experts}, -1.0, gates.options()).scatter(1, selected, gates.detach());
      auto top = std::get<1>(ranked.view({groups, s, n_experts}).topk(capacity, /*dim=*/1));
      auto within = torch::zeros({groups, s, n_experts}, flat.options()).scatter_(1, top, 1);
      auto keep = within.view({-1, n_experts}).gather(1, selected).reshape({-1});
      auto kept = torch::zeros_like(counts).scatter_add_(0, flat, keep);
      // Dropped rows sort after every expert's kept rows (key n_experts), out of the
      // dispatched slices; their gates are zero, so they add nothing.
      auto order = std::get<1>(flat.masked_fill(keep == 0, n_experts).sort(/*stable=*/true, 0, false));
      auto token_ids = order.div(top_k, "floor");
      auto kept_gates = gates.reshape({-1}).masked_fill(keep == 0, 0.0);
      return {x.index_select(0, token_ids), kept_gates.index_select(0, order).unsqueeze(1), token_ids, counts, kept};
    }
    // Sort the (token, slot) pairs by expert so each expert sees one contiguous slice.
    // A stable sort keeps token order within an expert, so results are reproducible.
    auto order = std::get<1>(selected.reshape({-1}).sort(/*stable=*/true, /*dim=*/0, /*descending=*/false));
    auto token_ids = order.div(top_k, "floor");
    return {x.index_select(0, token_ids), gates.reshape({-1}).index_select(0, order).unsqueeze(1), token_ids, counts};
  };
}

}  // namespace regions
}  // namespace trainyard::engine
