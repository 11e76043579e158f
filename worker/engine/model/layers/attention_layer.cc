#include "worker/engine/model/layers/attention_layer.h"

#include <cmath>
#include <optional>

#include "worker/engine/kernels/cpu/fused_cpu_kernels.h"
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
namespace F = torch::nn::functional;

RegionKey AttentionKey(int64_t dim, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, int64_t query_block,
                       int tp) {
  return RegionKey("attention", {{"dim", dim},
                                 {"n_heads", n_heads},
                                 {"n_kv_heads", n_kv_heads},
                                 {"head_dim", head_dim},
                                 {"query_block", query_block},
                                 {"tp", tp}});
}

bool SdpaExpandsKv(const Tensor& x, int64_t n_heads, int64_t n_kv_heads) {
  return n_heads != n_kv_heads && !x.is_cpu() && x.scalar_type() == torch::kFloat;
}

Tensor CausalSdpa(const Tensor& q, const Tensor& k, const Tensor& v, bool expand_kv) {
  const int64_t n_heads = q.size(1), n_kv_heads = k.size(1);
  TORCH_CHECK(n_heads % n_kv_heads == 0, "attention: ", n_heads, " query heads for ", n_kv_heads, " KV heads");
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  if (!expand_kv || n_heads == n_kv_heads) {
    return at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/std::nullopt, /*dropout_p=*/0.0,
                                            /*is_causal=*/true, scale, /*enable_gqa=*/n_heads != n_kv_heads);
  }
  // KV head g serves query heads g·rep .. g·rep + rep - 1, as enable_gqa pairs them.
  const int64_t rep = n_heads / n_kv_heads;
  auto expand = [&](const Tensor& x) {
    return x.unsqueeze(2)
        .expand({x.size(0), n_kv_heads, rep, x.size(2), x.size(3)})
        .reshape({x.size(0), n_heads, x.size(2), x.size(3)});
  };
  return at::scaled_dot_product_attention(q, expand(k), expand(v), /*attn_mask=*/std::nullopt, /*dropout_p=*/0.0,
                                          /*is_causal=*/true, scale, /*enable_gqa=*/false);
}

RegionFn Attention(int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, int64_t query_block) {
  return [=](const std::vector<Tensor>& in, const std::vector<Tensor>& p) -> std::vector<Tensor> {
    TORCH_CHECK(in.size() == 3, "attention: expected x, cos and sin, got ", in.size(), " inputs");
    const Tensor& x = in[0];
    const int64_t b = x.size(0), t = x.size(1), hd = head_dim;
    // One GEMM for q, k and v (three torchtitan-named parameters), and one RoPE pass
    // over the q and k heads together.
    auto qkv = Project(x, {p[0], p[1], p[2]});
    if (fused::AttentionApplies(qkv)) {
      // The same computation in one kernel (RoPE and the causal softmax included).
      return {Project(fused::CausalAttention(qkv, in[1], in[2], n_heads, n_kv_heads, head_dim, query_block), {p[3]})};
    }
    auto qk = qkv.narrow(-1, 0, (n_heads + n_kv_heads) * hd).view({b, t, n_heads + n_kv_heads, hd});
    qk = IsReducedPrecision(qkv) ? RotaryEmbedding::Rotate(qk.to(torch::kFloat), in[1], in[2]).to(qkv.scalar_type())
                                 : RotaryEmbedding::Rotate(qk, in[1], in[2]);
    // [b, heads, t, hd] views of the [b, t, heads, hd] rows: SDPA takes strided inputs,
    // and its output transposed back is contiguous rows again.
    auto q = qk.narrow(2, 0, n_heads).transpose(1, 2);
    auto k = qk.narrow(2, n_heads, n_kv_heads).transpose(1, 2);
    auto v = qkv.narrow(-1, (n_heads + n_kv_heads) * hd, n_kv_heads * hd).view({b, t, n_kv_heads, hd}).transpose(1, 2);
    auto out = CausalSdpa(q, k, v, SdpaExpandsKv(qkv, n_heads, n_kv_heads));
    out = out.transpose(1, 2).reshape({b, t, n_heads * hd});
    return {F::linear(out, AsComputeType(p[3], out))};
  };
}

}  // namespace regions
}  // namespace trainyard::engine
