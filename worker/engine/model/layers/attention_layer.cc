#include "worker/engine/model/layers/attention_layer.h"

#include "worker/engine/kernels/ops.h"
#include "worker/engine/model/regions/projection.h"
#include "worker/engine/parallel/parallel_autograd.h"

namespace trainyard::engine {
namespace {

torch::nn::Linear NoBias(int64_t in, int64_t out) {
  return torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(false));
}

}  // namespace

AttentionImpl::AttentionImpl(int64_t dim, int64_t n_heads, int64_t n_kv_heads, ParallelContext ctx,
                             RegionFactory& regions, int layer)
    : ctx_(ctx), n_heads_(n_heads / ctx.tp), n_kv_heads_(n_kv_heads / ctx.tp), head_dim_(dim / n_heads), dim_(dim) {
  TORCH_CHECK(n_heads % ctx.tp == 0 && n_kv_heads % ctx.tp == 0, "Attention: tp=", ctx.tp,
              " must divide n_heads=", n_heads, " and n_kv_heads=", n_kv_heads);
  wq = register_module("wq", NoBias(dim, n_heads_ * head_dim_));
  wk = register_module("wk", NoBias(dim, n_kv_heads_ * head_dim_));
  wv = register_module("wv", NoBias(dim, n_kv_heads_ * head_dim_));
  wo = register_module("wo", NoBias(n_heads_ * head_dim_, dim));
  const auto key = Key();
  region_ = regions.Make(key, Fn(), layer);
  if (ctx.tp > 1) regions.GraphBreak(key, "TP all-reduce of the row-parallel wo output (collective)");
}

compile::RegionKey AttentionImpl::Key() const {
  return regions::AttentionKey(dim_, n_heads_ * ctx_.tp, n_kv_heads_ * ctx_.tp, head_dim_, kQueryBlock, ctx_.tp);
}

compile::RegionFn AttentionImpl::Fn() const {
  return regions::Attention(n_heads_, n_kv_heads_, head_dim_, kQueryBlock);
}

const std::vector<torch::Tensor>& AttentionImpl::Constants(int64_t t, const RotaryEmbedding& rope,
                                                           const torch::TensorOptions& opts) {
  if (constants_t_ == t && constants_[0].device() == opts.device()) return constants_;
  // RoPE rotates in fp32 whatever the activations' dtype.
  const auto rope_opts = opts.dtype(torch::kFloat);
  constants_ = {rope.CosTable(t).to(rope_opts), rope.SinTable(t).to(rope_opts)};
  constants_t_ = t;
  return constants_;
}

torch::Tensor AttentionImpl::forward(const torch::Tensor& input, const RotaryEmbedding& rope) {
  auto x = CopyToRegion(input, ctx_.tp_group);
  std::vector<torch::Tensor> inputs{x};
  const auto& constants = Constants(x.size(1), rope, x.options());
  inputs.insert(inputs.end(), constants.begin(), constants.end());
  auto out = region_(inputs, {wq->weight, wk->weight, wv->weight, wo->weight})[0];
  return ReduceFromRegion(out, ctx_.tp_group);
}

namespace regions {

using compile::RegionFn;
using compile::RegionKey;
using torch::Tensor;

RegionKey AttentionKey(int64_t dim, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, int64_t query_block,
                       int tp) {
  return RegionKey("attention", {{"dim", dim},
                                 {"n_heads", n_heads},
                                 {"n_kv_heads", n_kv_heads},
                                 {"head_dim", head_dim},
                                 {"query_block", query_block},
                                 {"tp", tp}});
}

RegionFn Attention(int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, int64_t query_block) {
  return [=](const std::vector<Tensor>& in, const std::vector<Tensor>& p) -> std::vector<Tensor> {
    TORCH_CHECK(in.size() == 3, "attention: expected x, cos and sin, got ", in.size(), " inputs");
    // One GEMM for q, k and v (three torchtitan-named parameters), then RoPE and
    // causal attention in one operator (the fused CPU kernel, else SDPA).
    auto qkv = Project(in[0], {p[0], p[1], p[2]});
    return {Project(ops::CausalAttention(qkv, in[1], in[2], n_heads, n_kv_heads, head_dim, query_block), {p[3]})};
  };
}

}  // namespace regions
}  // namespace trainyard::engine
