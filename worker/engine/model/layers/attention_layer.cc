#include "worker/engine/model/layers/attention_layer.h"

#include "worker/engine/kernels/ops.h"
#include "worker/engine/model/regions/projection.h"
#include "worker/engine/parallel/parallel_autograd.h"

namespace trainyard::engine {

torch::nn::Linear NoBias(int64_t in, int64_t out) {
  return torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(false));
}

AttentionImpl::AttentionImpl(const spec::ModelSpec& c, ParallelContext ctx, RegionFactory& regions, int layer)
    : ctx_(ctx),
      qk_norm_eps_(c.qk_norm() ? c.norm_eps : 0),
      n_heads_(c.n_heads / ctx.tp),
      n_kv_heads_(c.n_kv_heads / ctx.tp),
      head_dim_(c.head_dim()),
      dim_(c.dim) {
  TORCH_CHECK(c.n_heads % ctx.tp == 0 && c.n_kv_heads % ctx.tp == 0, "Attention: tp=", ctx.tp,
              " must divide n_heads=", c.n_heads, " and n_kv_heads=", c.n_kv_heads);
  wq = register_module("wq", NoBias(dim_, n_heads_ * head_dim_));
  wk = register_module("wk", NoBias(dim_, n_kv_heads_ * head_dim_));
  wv = register_module("wv", NoBias(dim_, n_kv_heads_ * head_dim_));
  wo = register_module("wo", NoBias(n_heads_ * head_dim_, dim_));
  if (qk_norm_eps_ > 0) {
    q_norm = register_module("q_norm", RMSNorm(head_dim_, c.norm_eps));
    k_norm = register_module("k_norm", RMSNorm(head_dim_, c.norm_eps));
  }
  const auto key = Key();
  region_ = regions.Make(key, Fn(), layer);
  if (ctx.tp > 1) regions.GraphBreak(key, "TP all-reduce of the row-parallel wo output (collective)");
}

compile::RegionKey AttentionImpl::Key() const {
  return regions::AttentionKey(dim_, n_heads_ * ctx_.tp, n_kv_heads_ * ctx_.tp, head_dim_, kQueryBlock, ctx_.tp,
                               qk_norm_eps_);
}

compile::RegionFn AttentionImpl::Fn() const {
  return regions::Attention(n_heads_, n_kv_heads_, head_dim_, kQueryBlock, qk_norm_eps_);
}

std::vector<torch::Tensor> AttentionImpl::Params() const {
  std::vector<torch::Tensor> p{wq->weight, wk->weight, wv->weight, wo->weight};
  if (q_norm) p.insert(p.end(), {q_norm->weight, k_norm->weight});
  return p;
}

const std::vector<torch::Tensor>& AttentionImpl::Constants(int64_t t, const RotaryEmbedding& rope,
                                                           const torch::TensorOptions& opts) {
  return rope_tables_.Get(t, rope, opts);
}

torch::Tensor AttentionImpl::forward(const torch::Tensor& input, const RotaryEmbedding& rope) {
  auto x = CopyToRegion(input, ctx_.tp_group);
  std::vector<torch::Tensor> inputs{x};
  const auto& constants = Constants(x.size(1), rope, x.options());
  inputs.insert(inputs.end(), constants.begin(), constants.end());
  auto out = region_(inputs, Params())[0];
  return ReduceFromRegion(out, ctx_.tp_group);
}

namespace regions {

using compile::RegionFn;
using compile::RegionKey;
using torch::Tensor;

RegionKey AttentionKey(int64_t dim, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, int64_t query_block, int tp,
                       double qk_norm_eps) {
  std::vector<RegionKey::Field> fields{{"dim", dim},           {"n_heads", n_heads},         {"n_kv_heads", n_kv_heads},
                                       {"head_dim", head_dim}, {"query_block", query_block}, {"tp", tp}};
  if (qk_norm_eps > 0) fields.emplace_back("qk_norm_eps", qk_norm_eps);
  return RegionKey("attention", fields);
}

RegionFn Attention(int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, int64_t query_block, double qk_norm_eps) {
  return [=](const std::vector<Tensor>& in, const std::vector<Tensor>& p) -> std::vector<Tensor> {
    TORCH_CHECK(in.size() == 3, "attention: expected x, cos and sin, got ", in.size(), " inputs");
    // One GEMM for q, k and v (three torchtitan-named parameters), then RoPE and
    // causal attention in one operator (the fused CPU kernel, else SDPA).
    auto qkv = Project(in[0], {p[0], p[1], p[2]});
    if (qk_norm_eps > 0) {
      // Qwen3: each query and key head RMS-normalised over head_dim before RoPE.
      const auto b = qkv.size(0), t = qkv.size(1);
      auto heads = qkv.view({b, t, n_heads + 2 * n_kv_heads, head_dim});
      qkv = torch::cat({Normalize(heads.narrow(2, 0, n_heads), p[4], qk_norm_eps),
                        Normalize(heads.narrow(2, n_heads, n_kv_heads), p[5], qk_norm_eps),
                        heads.narrow(2, n_heads + n_kv_heads, n_kv_heads)},
                       2)
                .view({b, t, -1});
    }
    return {Project(ops::CausalAttention(qkv, in[1], in[2], n_heads, n_kv_heads, head_dim, query_block), {p[3]})};
  };
}

}  // namespace regions
}  // namespace trainyard::engine
