// One decoder block: h = x + attention(attention_norm(x)); out = h + ffn(ffn_norm(h)),
// where ffn is a dense SwiGLU (`feed_forward`) or an MoE (`moe`).
// Not thread-safe (a torch module); owned by TransformerModel.
#pragma once

#include <torch/torch.h>

#include "worker/engine/attention_layer.h"
#include "worker/engine/dense_ffn.h"
#include "worker/engine/engine_config.h"
#include "worker/engine/moe_layer.h"
#include "worker/engine/parallel_context.h"
#include "worker/engine/rms_norm.h"
#include "worker/engine/rotary_embedding.h"

namespace trainyard::engine {

struct BlockOutput {
  torch::Tensor out;
  torch::Tensor tokens_per_expert;  // undefined for a dense block
};

class TransformerBlockImpl : public torch::nn::Module {
 public:
  // `layer` names the block's regions in compile events; `selective_checkpoint`
  // recomputes the attention in backward instead of keeping its activations.
  TransformerBlockImpl(const ModelConfig& config, bool use_moe, ParallelContext ctx = {},
                       RegionFactory& regions = EagerRegionFactory(), int layer = -1,
                       bool selective_checkpoint = false, bool plant_side_effect = false,
                       bool block_regions = false);
  BlockOutput forward(const torch::Tensor& x, const RotaryEmbedding& rope);

  bool is_moe() const { return !moe.is_empty(); }

  RMSNorm attention_norm{nullptr};
  Attention attention{nullptr};
  RMSNorm ffn_norm{nullptr};
  FeedForward feed_forward{nullptr};  // dense blocks
  MoE moe{nullptr};                   // MoE blocks

 private:
  bool selective_checkpoint_;
  // regions = "model": the block runs as dense_block, or moe_block_entry → experts →
  // moe_block_exit, instead of its modules' own regions. Null calls otherwise.
  RegionCall block_region_, exit_region_;
};
TORCH_MODULE(TransformerBlock);

}  // namespace trainyard::engine
