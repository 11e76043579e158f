#include "worker/engine/model/moe/moe_router.h"

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
                    double route_scale) {
  return RegionKey("router", {{"dim", dim},
                              {"n_experts", n_experts},
                              {"top_k", top_k},
                              {"score_func", score_func},
                              {"route_norm", route_norm},
                              {"route_scale", route_scale}});
}

RegionFn Router(int64_t top_k, std::string score_func, bool route_norm, double route_scale, Tensor plant_into) {
  return [=](const std::vector<Tensor>& in, const std::vector<Tensor>& p) -> std::vector<Tensor> {
    const Tensor& x = in[0];
    const Tensor& expert_bias = in[1];
    // bf16: the gate's GEMM in bf16, the scores (and so the gates) in fp32, as
    // torchtitan's router does.
    auto logits = Project(x, {p[0]});
    if (IsReducedPrecision(logits)) logits = logits.to(torch::kFloat);
    auto scores = score_func == "softmax" ? torch::softmax(logits, -1) : torch::sigmoid(logits);
    // Selection is discrete: the bias steers it but gets no gradient.
    auto selected = std::get<1>(torch::topk(scores.detach() + expert_bias, top_k, /*dim=*/-1));
    auto gates = scores.gather(1, selected);
    if (route_norm && top_k > 1) gates = gates / (gates.sum(-1, /*keepdim=*/true) + 1e-20);
    if (route_scale != 1.0) gates = gates * route_scale;
    // A scatter, not bincount: bincount sizes its output from the largest id, which on
    // CUDA is a host synchronisation.
    const auto flat = selected.reshape({-1});
    auto counts = torch::zeros({expert_bias.size(0)}, flat.options()).scatter_add_(0, flat, torch::ones_like(flat));
    if (plant_into.defined()) plant_into.copy_(counts);  // test-only planted side effect
    // Sort the (token, slot) pairs by expert so each expert sees one contiguous slice.
    // A stable sort keeps token order within an expert, so results are reproducible.
    auto order = std::get<1>(selected.reshape({-1}).sort(/*stable=*/true, /*dim=*/0, /*descending=*/false));
    auto token_ids = order.div(top_k, "floor");
    return {x.index_select(0, token_ids), gates.reshape({-1}).index_select(0, order).unsqueeze(1), token_ids, counts};
  };
}

}  // namespace regions
}  // namespace trainyard::engine
