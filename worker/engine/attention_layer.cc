#include "worker/engine/attention_layer.h"

#include <cmath>
#include <limits>

#include "worker/engine/parallel_autograd.h"

namespace trainyard::engine {
namespace {

torch::nn::Linear NoBias(int64_t in, int64_t out) {
  return torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(false));
}

}  // namespace

AttentionImpl::AttentionImpl(int64_t dim, int64_t n_heads, int64_t n_kv_heads, ParallelContext ctx)
    : ctx_(ctx), n_heads_(n_heads / ctx.tp), n_kv_heads_(n_kv_heads / ctx.tp), head_dim_(dim / n_heads) {
  TORCH_CHECK(n_heads % ctx.tp == 0 && n_kv_heads % ctx.tp == 0, "Attention: tp=", ctx.tp,
              " must divide n_heads=", n_heads, " and n_kv_heads=", n_kv_heads);
  wq = register_module("wq", NoBias(dim, n_heads_ * head_dim_));
  wk = register_module("wk", NoBias(dim, n_kv_heads_ * head_dim_));
  wv = register_module("wv", NoBias(dim, n_kv_heads_ * head_dim_));
  wo = register_module("wo", NoBias(n_heads_ * head_dim_, dim));
}

torch::Tensor AttentionImpl::forward(const torch::Tensor& input, const RotaryEmbedding& rope) {
  auto x = CopyToRegion(input, ctx_.tp_group);
  const int64_t b = x.size(0), t = x.size(1);
  const int64_t rep = n_heads_ / n_kv_heads_;
  auto q = rope.Apply(wq(x).view({b, t, n_heads_, head_dim_}));
  auto k = rope.Apply(wk(x).view({b, t, n_kv_heads_, head_dim_}));
  auto v = wv(x).view({b, t, n_kv_heads_, head_dim_});
  // Group query heads by their KV head: query head h = g*rep + r uses KV head g, so q
  // viewed as [b*n_kv, rep*t, hd] multiplies K/V of shape [b*n_kv, t, hd] with no repeat.
  const int64_t groups = b * n_kv_heads_;
  auto qg = q.transpose(1, 2).reshape({groups, rep * t, head_dim_});
  auto kg = k.transpose(1, 2).reshape({groups, t, head_dim_});
  auto vg = v.transpose(1, 2).reshape({groups, t, head_dim_});
  if (causal_mask_t_ != t) {
    auto future = torch::ones({t, t}, torch::TensorOptions().dtype(torch::kBool)).triu(1);
    causal_mask_ = torch::zeros({t, t}, q.options())
                       .masked_fill(future, -std::numeric_limits<float>::infinity())
                       .repeat({rep, 1});
    causal_mask_t_ = t;
  }
  // scale·(q·kᵀ) + mask: 0 where allowed, -inf in the future (same as masked_fill).
  auto scores = torch::baddbmm(causal_mask_.to(q.options()), qg, kg.transpose(1, 2), /*beta=*/1,
                               /*alpha=*/1.0 / std::sqrt(static_cast<double>(head_dim_)));
  auto out = torch::bmm(torch::softmax(scores, -1), vg)  // [b*n_kv, rep*t, hd]
                 .view({b, n_heads_, t, head_dim_});
  return ReduceFromRegion(wo(out.transpose(1, 2).reshape({b, t, n_heads_ * head_dim_})), ctx_.tp_group);
}

}  // namespace trainyard::engine
