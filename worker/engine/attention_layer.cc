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
  if (rep > 1) {
    // Repeat each KV head `rep` times in place order, so query head h gets KV h/rep.
    k = k.unsqueeze(3).expand({b, t, n_kv_heads_, rep, head_dim_}).reshape({b, t, n_heads_, head_dim_});
    v = v.unsqueeze(3).expand({b, t, n_kv_heads_, rep, head_dim_}).reshape({b, t, n_heads_, head_dim_});
  }
  q = q.transpose(1, 2);  // [b, h, t, hd]
  k = k.transpose(1, 2);
  v = v.transpose(1, 2);
  auto scores = torch::matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(static_cast<double>(head_dim_)));
  auto future = torch::ones({t, t}, torch::TensorOptions().dtype(torch::kBool)).triu(1);
  scores = scores.masked_fill(future, -std::numeric_limits<float>::infinity());
  auto out = torch::matmul(torch::softmax(scores, -1), v);  // [b, h, t, hd]
  return ReduceFromRegion(wo(out.transpose(1, 2).reshape({b, t, n_heads_ * head_dim_})), ctx_.tp_group);
}

}  // namespace trainyard::engine
