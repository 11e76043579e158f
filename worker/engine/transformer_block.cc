#include "worker/engine/transformer_block.h"

#include "worker/engine/compile/checkpoint.h"

namespace trainyard::engine {

TransformerBlockImpl::TransformerBlockImpl(const ModelConfig& c, bool use_moe, ParallelContext ctx,
                                           RegionFactory& regions, int layer, bool selective_checkpoint,
                                           bool plant_side_effect, bool block_regions)
    : selective_checkpoint_(selective_checkpoint) {
  TORCH_CHECK(!block_regions || (ctx.tp == 1 && !selective_checkpoint),
              "compile.regions=model needs parallelism.tp=1 and activation_checkpoint.mode none or full");
  // Under block regions the modules' own regions are plain functions the block embeds.
  RegionFactory& parts = block_regions ? EagerRegionFactory() : regions;
  attention_norm = register_module("attention_norm", RMSNorm(c.dim, c.norm_eps, parts, layer));
  attention = register_module("attention", Attention(c.dim, c.n_heads, c.n_kv_heads, ctx, parts, layer));
  ffn_norm = register_module("ffn_norm", RMSNorm(c.dim, c.norm_eps, parts, layer));
  if (use_moe) {
    moe = register_module("moe", MoE(c, ctx, regions, layer, plant_side_effect, block_regions));
  } else {
    feed_forward = register_module("feed_forward", FeedForward(c.dim, c.ffn_hidden, ctx, parts, layer));
  }
  if (!block_regions) return;
  const int64_t hd = c.head_dim(), qb = AttentionImpl::kQueryBlock;
  if (use_moe) {
    block_region_ = regions.Make(regions::MoeBlockEntryKey(c, qb),
                                 regions::MoeBlockEntry(c.norm_eps, c.n_heads, c.n_kv_heads, hd, qb, moe->router_fn()),
                                 layer);
    const bool shared = !moe->shared_experts.is_empty();
    exit_region_ = regions.Make(regions::MoeBlockExitKey(c), regions::MoeBlockExit(shared), layer);
  } else {
    block_region_ = regions.Make(regions::DenseBlockKey(c, qb),
                                 regions::DenseBlock(c.norm_eps, c.n_heads, c.n_kv_heads, hd, qb), layer);
  }
}

BlockOutput TransformerBlockImpl::forward(const torch::Tensor& x, const RotaryEmbedding& rope) {
  if (block_region_) {
    std::vector<torch::Tensor> in{x};
    const auto& constants = attention->Constants(x.size(1), rope, x.options());
    in.insert(in.end(), constants.begin(), constants.end());
    std::vector<torch::Tensor> p{attention_norm->weight, attention->wq->weight, attention->wk->weight,
                                 attention->wv->weight, attention->wo->weight, ffn_norm->weight};
    if (!moe) {
      p.insert(p.end(), {feed_forward->w1->weight, feed_forward->w2->weight, feed_forward->w3->weight});
      return {block_region_(in, p)[0], torch::Tensor()};
    }
    in.push_back(moe->expert_bias);
    p.push_back(moe->router->gate->weight);
    // h, normed rows, then the router's rows, gates, token ids, counts.
    const auto entry = block_region_(in, p);
    auto back = moe->RunExperts(entry[2], entry[5]);
    std::vector<torch::Tensor> shared;
    if (!moe->shared_experts.is_empty()) {
      shared = {moe->shared_experts->w1->weight, moe->shared_experts->w2->weight, moe->shared_experts->w3->weight};
    }
    return {exit_region_({entry[0], back, entry[3], entry[4], entry[1]}, shared)[0], entry[5]};
  }
  auto normed = attention_norm(x);
  torch::Tensor attn;
  if (selective_checkpoint_ && torch::GradMode::is_enabled()) {
    attn = compile::Checkpointed([this, &rope](const std::vector<torch::Tensor>& in) -> std::vector<torch::Tensor> {
             return {attention(in[0], rope)};
           }, {normed})[0];
  } else {
    attn = attention(normed, rope);
  }
  auto h = x + attn;
  if (moe) {
    MoEOutput m = moe(ffn_norm(h));
    return {h + m.out, m.tokens_per_expert};
  }
  return {h + feed_forward(ffn_norm(h)), torch::Tensor()};
}

}  // namespace trainyard::engine
