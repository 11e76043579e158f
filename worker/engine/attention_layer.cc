#include "worker/engine/attention_layer.h"

#include <algorithm>
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

const std::vector<torch::Tensor>& AttentionImpl::CausalMasks(int64_t t, int64_t rep,
                                                           const torch::TensorOptions& opts) {
  if (masks_t_ == t && !masks_.empty() && masks_[0].options().dtype() == opts.dtype() &&
      masks_[0].device() == opts.device()) {
    return masks_;
  }
  masks_.clear();
  for (int64_t begin = 0; begin < t; begin += kQueryBlock) {
    const int64_t len = std::min(kQueryBlock, t - begin);
    auto rows = torch::arange(begin, begin + len, torch::kInt64).unsqueeze(1);
    auto cols = torch::arange(0, begin + len, torch::kInt64).unsqueeze(0);
    masks_.push_back(torch::zeros({len, begin + len}, opts)
                         .masked_fill(cols > rows, -std::numeric_limits<float>::infinity())
                         .repeat_interleave(rep, 0));
  }
  masks_t_ = t;
  return masks_;
}

torch::Tensor AttentionImpl::forward(const torch::Tensor& input, const RotaryEmbedding& rope) {
  auto x = CopyToRegion(input, ctx_.tp_group);
  const int64_t b = x.size(0), t = x.size(1);
  const int64_t rep = n_heads_ / n_kv_heads_, hd = head_dim_;
  // One GEMM for q, k and v (the weights stay three torchtitan-named parameters), and
  // one RoPE pass over the q and k heads together.
  auto qkv = torch::nn::functional::linear(x, torch::cat({wq->weight, wk->weight, wv->weight}, 0));
  auto qk = rope.Apply(qkv.narrow(-1, 0, (n_heads_ + n_kv_heads_) * hd).view({b, t, n_heads_ + n_kv_heads_, hd}));
  auto v = qkv.narrow(-1, (n_heads_ + n_kv_heads_) * hd, n_kv_heads_ * hd).view({b, t, n_kv_heads_, hd});
  // Group query heads by their KV head: query head h = g*rep + r uses KV head g. Rows of
  // a group are (position, r), so q as [b*n_kv, t*rep, hd] multiplies K/V of shape
  // [b*n_kv, t, hd] with no repeat, and a block of positions is a block of rows.
  const int64_t groups = b * n_kv_heads_;
  auto q = qk.narrow(2, 0, n_heads_).reshape({b, t, n_kv_heads_, rep, hd}).permute({0, 2, 1, 3, 4})
               .reshape({groups, t * rep, hd});
  auto k = qk.narrow(2, n_heads_, n_kv_heads_).permute({0, 2, 1, 3}).reshape({groups, t, hd});
  auto vg = v.permute({0, 2, 1, 3}).reshape({groups, t, hd});
  // Causal attention in blocks of kQueryBlock query positions: block j only scores the
  // keys up to its last position, which skips most of the masked upper triangle
  // (5/8 of the full t×t work for 4 blocks) with the same result.
  const auto& masks = CausalMasks(t, rep, q.options());
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  // split, not narrow: narrow's backward would allocate a zero gradient of q per block.
  const auto q_blocks = q.split(kQueryBlock * rep, 1);
  std::vector<torch::Tensor> blocks;
  blocks.reserve(masks.size());
  for (size_t j = 0; j < masks.size(); ++j) {
    const int64_t keys = masks[j].size(1);
    auto scores = torch::baddbmm(masks[j], q_blocks[j], k.narrow(1, 0, keys).transpose(1, 2), /*beta=*/1,
                                 /*alpha=*/scale);
    blocks.push_back(torch::bmm(torch::softmax(scores, -1), vg.narrow(1, 0, keys)));
  }
  auto out = blocks.size() == 1 ? blocks[0] : torch::cat(blocks, 1);  // [b*n_kv, t*rep, hd]
  out = out.view({b, n_kv_heads_, t, rep, hd}).permute({0, 2, 1, 3, 4}).reshape({b, t, n_heads_ * hd});
  return ReduceFromRegion(wo(out), ctx_.tp_group);
}

}  // namespace trainyard::engine
