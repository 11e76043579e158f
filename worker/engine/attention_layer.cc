#include "worker/engine/attention_layer.h"

#include "worker/engine/parallel_autograd.h"

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
  if (constants_t_ == t && constants_[0].options().dtype() == opts.dtype() &&
      constants_[0].device() == opts.device()) {
    return constants_;
  }
  constants_ = {rope.CosTable(t).to(opts), rope.SinTable(t).to(opts)};
  // The masks are built on the host (their index comparisons are host tensors) and
  // moved once to the activations' device; the cache keeps them there.
  const auto host = opts.device(torch::kCPU);
  for (auto& m : regions::CausalBlockMasks(t, n_heads_ / n_kv_heads_, kQueryBlock, host)) {
    constants_.push_back(m.to(opts.device()));
  }
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

}  // namespace trainyard::engine
