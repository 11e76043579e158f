#include "worker/engine/transformer_block.h"

namespace trainyard::engine {

TransformerBlockImpl::TransformerBlockImpl(const ModelConfig& c, bool use_moe, ParallelContext ctx) {
  attention_norm = register_module("attention_norm", RMSNorm(c.dim, c.norm_eps));
  attention = register_module("attention", Attention(c.dim, c.n_heads, c.n_kv_heads, ctx));
  ffn_norm = register_module("ffn_norm", RMSNorm(c.dim, c.norm_eps));
  if (use_moe) {
    moe = register_module("moe", MoE(c, ctx));
  } else {
    feed_forward = register_module("feed_forward", FeedForward(c.dim, c.ffn_hidden, ctx));
  }
}

BlockOutput TransformerBlockImpl::forward(const torch::Tensor& x, const RotaryEmbedding& rope) {
  auto h = x + attention(attention_norm(x), rope);
  if (moe) {
    MoEOutput m = moe(ffn_norm(h));
    return {h + m.out, m.tokens_per_expert};
  }
  return {h + feed_forward(ffn_norm(h)), torch::Tensor()};
}

}  // namespace trainyard::engine
