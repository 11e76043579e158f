#include "worker/engine/transformer_block.h"

#include "worker/engine/compile/checkpoint.h"

namespace trainyard::engine {

TransformerBlockImpl::TransformerBlockImpl(const ModelConfig& c, bool use_moe, ParallelContext ctx,
                                           RegionFactory& regions, int layer, bool selective_checkpoint,
                                           bool plant_side_effect)
    : selective_checkpoint_(selective_checkpoint) {
  attention_norm = register_module("attention_norm", RMSNorm(c.dim, c.norm_eps, regions, layer));
  attention = register_module("attention", Attention(c.dim, c.n_heads, c.n_kv_heads, ctx, regions, layer));
  ffn_norm = register_module("ffn_norm", RMSNorm(c.dim, c.norm_eps, regions, layer));
  if (use_moe) {
    moe = register_module("moe", MoE(c, ctx, regions, layer, plant_side_effect));
  } else {
    feed_forward = register_module("feed_forward", FeedForward(c.dim, c.ffn_hidden, ctx, regions, layer));
  }
}

BlockOutput TransformerBlockImpl::forward(const torch::Tensor& x, const RotaryEmbedding& rope) {
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
