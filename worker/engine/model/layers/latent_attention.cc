#include "worker/engine/model/layers/latent_attention.h"

#include <cmath>

#include "worker/engine/model/layers/attention_layer.h"
#include "worker/engine/model/layers/rms_norm.h"
#include "worker/engine/model/regions/projection.h"
#include "worker/engine/parallel/parallel_autograd.h"

namespace trainyard::engine {
namespace {

// x [b, t, heads, d] rotated in fp32 whatever its dtype (projection.h's rule).
torch::Tensor RotateFp32(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  if (!regions::IsReducedPrecision(x)) return RotaryEmbedding::Rotate(x, cos, sin);
  return RotaryEmbedding::Rotate(x.to(torch::kFloat), cos, sin).to(x.scalar_type());
}

}  // namespace

LatentAttentionImpl::LatentAttentionImpl(const spec::ModelSpec& c, ParallelContext ctx, RegionFactory& regions,
                                         int layer)
    : ctx_(ctx), config_(c), local_heads_(c.n_heads / ctx.tp) {
  TORCH_CHECK(c.mla(), "LatentAttention: model.architecture=", c.architecture, " has no latent attention");
  TORCH_CHECK(c.n_heads % ctx.tp == 0, "LatentAttention: tp=", ctx.tp, " must divide n_heads=", c.n_heads);
  const int64_t qk = c.qk_head_dim();
  if (c.q_lora_rank == 0) {
    wq = register_module("wq", NoBias(c.dim, local_heads_ * qk));
  } else {
    wq_a = register_module("wq_a", NoBias(c.dim, c.q_lora_rank));
    q_norm = register_module("q_norm", RMSNorm(c.q_lora_rank, c.norm_eps));
    wq_b = register_module("wq_b", NoBias(c.q_lora_rank, local_heads_ * qk));
  }
  wkv_a = register_module("wkv_a", NoBias(c.dim, c.kv_lora_rank + c.qk_rope_head_dim));
  kv_norm = register_module("kv_norm", RMSNorm(c.kv_lora_rank, c.norm_eps));
  wkv_b = register_module("wkv_b", NoBias(c.kv_lora_rank, local_heads_ * (c.qk_nope_head_dim + c.v_head_dim)));
  wo = register_module("wo", NoBias(local_heads_ * c.v_head_dim, c.dim));
  const auto key = regions::LatentAttentionKey(c, ctx.tp);
  region_ = regions.Make(key, regions::LatentAttention(c, local_heads_), layer);
  if (ctx.tp > 1) regions.GraphBreak(key, "TP all-reduce of the row-parallel wo output (collective)");
}

std::vector<torch::Tensor> LatentAttentionImpl::Params() const {
  std::vector<torch::Tensor> p;
  if (wq) {
    p.push_back(wq->weight);
  } else {
    p.insert(p.end(), {wq_a->weight, q_norm->weight, wq_b->weight});
  }
  p.insert(p.end(), {wkv_a->weight, kv_norm->weight, wkv_b->weight, wo->weight});
  return p;
}

torch::Tensor LatentAttentionImpl::forward(const torch::Tensor& input, const RotaryEmbedding& rope) {
  auto x = CopyToRegion(input, ctx_.tp_group);
  const auto& tables = rope_tables_.Get(x.size(1), rope, x.options());
  auto out = region_({x, tables[0], tables[1]}, Params())[0];
  return ReduceFromRegion(out, ctx_.tp_group);
}

namespace regions {

using compile::RegionFn;
using compile::RegionKey;
using torch::Tensor;

double LatentAttentionScale(const spec::ModelSpec& c) {
  double scale = 1.0 / std::sqrt(static_cast<double>(c.qk_head_dim()));
  if (c.rope_factor > 1.0) {
    const double m = 0.1 * c.mscale * std::log(c.rope_factor) + 1.0;
    scale *= m * m;
  }
  return scale;
}

RegionKey LatentAttentionKey(const spec::ModelSpec& c, int tp) {
  return RegionKey("mla_attention", {{"dim", c.dim},
                                     {"n_heads", c.n_heads},
                                     {"q_lora_rank", c.q_lora_rank},
                                     {"kv_lora_rank", c.kv_lora_rank},
                                     {"qk_nope_head_dim", c.qk_nope_head_dim},
                                     {"qk_rope_head_dim", c.qk_rope_head_dim},
                                     {"v_head_dim", c.v_head_dim},
                                     {"scale", LatentAttentionScale(c)},
                                     {"eps", c.norm_eps},
                                     {"tp", tp}});
}

RegionFn LatentAttention(const spec::ModelSpec& c, int64_t local_heads) {
  const int64_t nope = c.qk_nope_head_dim, rope = c.qk_rope_head_dim, vd = c.v_head_dim, kv_rank = c.kv_lora_rank;
  const bool low_rank_q = c.q_lora_rank > 0;
  const double eps = c.norm_eps, scale = LatentAttentionScale(c);
  return [=](const std::vector<Tensor>& in, const std::vector<Tensor>& p) -> std::vector<Tensor> {
    TORCH_CHECK(in.size() == 3, "mla_attention: expected x, cos and sin, got ", in.size(), " inputs");
    TORCH_CHECK(p.size() == (low_rank_q ? 7u : 5u), "mla_attention: expected ", low_rank_q ? 7 : 5, " params, got ",
                p.size());
    const Tensor& x = in[0];
    const Tensor &cos = in[1], &sin = in[2];
    const int64_t b = x.size(0), t = x.size(1);
    size_t i = 0;
    Tensor q;
    if (low_rank_q) {
      q = Project(Normalize(Project(x, {p[0]}), p[1], eps), {p[2]});
      i = 3;
    } else {
      q = Project(x, {p[0]});
      i = 1;
    }
    q = q.view({b, t, local_heads, nope + rope});
    Tensor q_pe = RotateFp32(q.narrow(-1, nope, rope), cos, sin);
    Tensor kv = Project(x, {p[i]});
    // The shared RoPE key: one head, broadcast over the local heads below.
    Tensor k_pe = RotateFp32(kv.narrow(-1, kv_rank, rope).unsqueeze(2), cos, sin);
    Tensor kv_heads = Project(Normalize(kv.narrow(-1, 0, kv_rank), p[i + 1], eps), {p[i + 2]});
    kv_heads = kv_heads.view({b, t, local_heads, nope + vd});
    // [b, heads, t, d] for SDPA: its causal kernels take strided views.
    Tensor query = torch::cat({q.narrow(-1, 0, nope), q_pe}, -1).transpose(1, 2);
    Tensor key = torch::cat({kv_heads.narrow(-1, 0, nope), k_pe.expand({b, t, local_heads, rope})}, -1).transpose(1, 2);
    Tensor value = kv_heads.narrow(-1, nope, vd).transpose(1, 2);
    Tensor out = at::scaled_dot_product_attention(query, key, value, /*attn_mask=*/{}, /*dropout_p=*/0.0,
                                                  /*is_causal=*/true, scale);
    return {Project(out.transpose(1, 2).reshape({b, t, local_heads * vd}), {p[i + 3]})};
  };
}

}  // namespace regions
}  // namespace trainyard::engine
