// One decoder block: h = x + attention(attention_norm(x)); out = h + ffn(ffn_norm(h)),
// where ffn is a dense SwiGLU (`feed_forward`) or an MoE (`moe`).
// Not thread-safe (a torch module); owned by TransformerModel.
#pragma once

#include <torch/torch.h>

#include "worker/engine/compile/region/region_fn.h"
#include "worker/engine/compile/region/region_key.h"
#include "worker/engine/config/engine_config.h"
#include "worker/engine/model/layers/attention_layer.h"
#include "worker/engine/model/layers/dense_ffn.h"
#include "worker/engine/model/layers/latent_attention.h"
#include "worker/engine/model/layers/rms_norm.h"
#include "worker/engine/model/layers/rotary_embedding.h"
#include "worker/engine/model/moe/moe_layer.h"
#include "worker/engine/model/regions/region_factory.h"
#include "worker/engine/parallel/mesh/parallel_context.h"

namespace trainyard::engine {

struct BlockOutput {
  torch::Tensor out;
  torch::Tensor tokens_per_expert;  // undefined for a dense block
  torch::Tensor dropped;            // 0-d int64; undefined for a dense or dropless block
};

class TransformerBlockImpl : public torch::nn::Module {
 public:
  // `layer` names the block's regions in compile events; `selective_checkpoint`
  // recomputes the attention in backward instead of keeping its activations.
  TransformerBlockImpl(const ModelConfig& config, bool use_moe, ParallelContext ctx = {},
                       RegionFactory& regions = EagerRegionFactory(), int layer = -1, bool selective_checkpoint = false,
                       bool plant_side_effect = false, bool block_regions = false);
  BlockOutput forward(const torch::Tensor& x, const RotaryEmbedding& rope);

  bool is_moe() const { return !moe.is_empty(); }

  RMSNorm attention_norm{nullptr};
  Attention attention{nullptr};  // grouped-query attention (architecture trainyard)
  LatentAttention mla{nullptr};  // registered as "attention" too (deepseek_v3)
  RMSNorm ffn_norm{nullptr};
  FeedForward feed_forward{nullptr};  // dense blocks
  MoE moe{nullptr};                   // MoE blocks

 private:
  // The block's attention, grouped-query or latent, on the normed input.
  torch::Tensor Attend(const torch::Tensor& normed, const RotaryEmbedding& rope);

  bool selective_checkpoint_;
  // regions = "model": the block runs as dense_block, or moe_block_entry → experts →
  // moe_block_exit, instead of its modules' own regions. Null calls otherwise.
  RegionCall block_region_, exit_region_;
};
TORCH_MODULE(TransformerBlock);

namespace regions {

// regions = "model": one region per stretch of a block between graph breaks (tp = 1).
//   dense_block      x, cos, sin → x + attn + ffn, the whole block
//                    params: attention_norm, wq, wk, wv, wo, ffn_norm, w1, w2, w3
//   moe_block_entry  x, cos, sin, expert_bias → h (after attention), normed h,
//                    then the router's four outputs
//                    params: attention_norm, wq, wk, wv, wo, ffn_norm, gate
//   moe_block_exit   h, expert rows (back from the experts), gates, token ids, normed h
//                    → h + routed + shared; params: shared w1, w2, w3 (none without one)
// Keys hold the attention config, the norm eps, and the FFN / router config of the block.
compile::RegionKey DenseBlockKey(const ModelConfig& c, int64_t query_block);
compile::RegionKey MoeBlockEntryKey(const ModelConfig& c, int64_t query_block);
compile::RegionKey MoeBlockExitKey(const ModelConfig& c);
compile::RegionFn DenseBlock(double eps, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, int64_t query_block);
// With a capacity that can drop (CapacityCanDrop for the sequence length) the router
// gets normed h as [batch, seq, dim], and the entry a seventh output, the router's kept
// rows per expert.
compile::RegionFn MoeBlockEntry(double eps, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, int64_t query_block,
                                compile::RegionFn router, const ModelConfig& c);
compile::RegionFn MoeBlockExit(bool has_shared);

}  // namespace regions

}  // namespace trainyard::engine
