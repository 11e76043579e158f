#include "worker/engine/model/layers/attention_layer.h"

#include <algorithm>
#include <cmath>
#include <limits>

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
  if (constants_t_ == t && constants_[2].options().dtype() == opts.dtype() &&
      constants_[0].device() == opts.device()) {
    return constants_;
  }
  // RoPE rotates in fp32 whatever the activations' dtype; the masks add to the scores,
  // so they take the activations' dtype.
  const auto rope_opts = opts.dtype(torch::kFloat);
  constants_ = {rope.CosTable(t).to(rope_opts), rope.SinTable(t).to(rope_opts)};
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

namespace regions {

using compile::RegionFn;
using compile::RegionKey;
using torch::Tensor;
namespace F = torch::nn::functional;

RegionKey AttentionKey(int64_t dim, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, int64_t query_block,
                       int tp) {
  return RegionKey("attention", {{"dim", dim}, {"n_heads", n_heads}, {"n_kv_heads", n_kv_heads},
                                 {"head_dim", head_dim}, {"query_block", query_block}, {"tp", tp}});
}

std::vector<Tensor> CausalBlockMasks(int64_t t, int64_t rep, int64_t query_block,
                                     const torch::TensorOptions& options) {
  std::vector<Tensor> masks;
  for (int64_t begin = 0; begin < t; begin += query_block) {
    const int64_t len = std::min(query_block, t - begin);
    auto rows = torch::arange(begin, begin + len, torch::kInt64).unsqueeze(1);
    auto cols = torch::arange(0, begin + len, torch::kInt64).unsqueeze(0);
    masks.push_back(torch::zeros({len, begin + len}, options)
                        .masked_fill(cols > rows, -std::numeric_limits<float>::infinity())
                        .repeat_interleave(rep, 0));
  }
  return masks;
}

RegionFn Attention(int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, int64_t query_block) {
  return [=](const std::vector<Tensor>& in, const std::vector<Tensor>& p) -> std::vector<Tensor> {
    const Tensor& x = in[0];
    const int64_t b = x.size(0), t = x.size(1), hd = head_dim;
    const int64_t rep = n_heads / n_kv_heads;
    // One GEMM for q, k and v (three torchtitan-named parameters), and one RoPE pass
    // over the q and k heads together.
    auto qkv = Project(x, {p[0], p[1], p[2]});
    const size_t n_blocks = in.size() - 3;
    TORCH_CHECK(static_cast<int64_t>(n_blocks) == (t + query_block - 1) / query_block, "attention: ", n_blocks,
                " masks for ", t, " positions in blocks of ", query_block);
    if (fused::Applies(qkv)) {
      // The same computation in one kernel (RoPE, masks and softmax included).
      return {Project(fused::CausalAttention(qkv, in[1], in[2], n_heads, n_kv_heads, head_dim, query_block), {p[3]})};
    }
    auto qk = qkv.narrow(-1, 0, (n_heads + n_kv_heads) * hd).view({b, t, n_heads + n_kv_heads, hd});
    qk = IsReducedPrecision(qkv) ? RotaryEmbedding::Rotate(qk.to(torch::kFloat), in[1], in[2]).to(qkv.scalar_type())
                                 : RotaryEmbedding::Rotate(qk, in[1], in[2]);
    auto v = qkv.narrow(-1, (n_heads + n_kv_heads) * hd, n_kv_heads * hd).view({b, t, n_kv_heads, hd});
    // Group query heads by their KV head: query head h = g*rep + r uses KV head g. Rows
    // of a group are (position, r), so q as [b*n_kv, t*rep, hd] multiplies K/V of shape
    // [b*n_kv, t, hd] with no repeat, and a block of positions is a block of rows.
    const int64_t groups = b * n_kv_heads;
    auto q = qk.narrow(2, 0, n_heads).reshape({b, t, n_kv_heads, rep, hd}).permute({0, 2, 1, 3, 4})
                 .reshape({groups, t * rep, hd});
    auto k = qk.narrow(2, n_heads, n_kv_heads).permute({0, 2, 1, 3}).reshape({groups, t, hd});
    auto vg = v.permute({0, 2, 1, 3}).reshape({groups, t, hd});
    // Block j scores only the keys up to its last position, skipping most of the masked
    // upper triangle (5/8 of the t×t work for 4 blocks) with the same result. split,
    // not narrow: narrow's backward would allocate a zero gradient of q per block.
    const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
    const auto q_blocks = q.split(query_block * rep, 1);
    std::vector<Tensor> blocks;
    blocks.reserve(n_blocks);
    for (size_t j = 0; j < n_blocks; ++j) {
      const Tensor& mask = in[3 + j];
      const int64_t keys = mask.size(1);
      auto scores = torch::baddbmm(mask, q_blocks[j], k.narrow(1, 0, keys).transpose(1, 2), /*beta=*/1,
                                   /*alpha=*/scale);
      // bf16: the softmax runs in fp32 and its probabilities go back to bf16.
      auto probs = IsReducedPrecision(scores) ? torch::softmax(scores, -1, torch::kFloat).to(scores.scalar_type())
                                              : torch::softmax(scores, -1);
      blocks.push_back(torch::bmm(probs, vg.narrow(1, 0, keys)));
    }
    auto out = blocks.size() == 1 ? blocks[0] : torch::cat(blocks, 1);  // [b*n_kv, t*rep, hd]
    out = out.view({b, n_kv_heads, t, rep, hd}).permute({0, 2, 1, 3, 4}).reshape({b, t, n_heads * hd});
    return {F::linear(out, AsComputeType(p[3], out))};
  };
}

}  // namespace regions
}  // namespace trainyard::engine
