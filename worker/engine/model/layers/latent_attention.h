// Multi-head latent attention (DeepSeek-V2/V3, torchtitan's names): the query comes from
// x through a low-rank bottleneck (wq_a, q_norm, wq_b) or one projection (wq,
// q_lora_rank = 0); keys and values come from one compressed latent per position
// (wkv_a → kv_norm → wkv_b) plus a RoPE key shared by every head. Each head's query
// and key are [nope | rope] wide, its value v_head_dim; the RoPE halves rotate
// consecutive pairs (the interleaved layout), and the softmax scale is
// qk_head_dim^-½ · m², m = 0.1·mscale·ln(rope_factor) + 1 under YaRN (rope_factor > 1).
//
// Tensor parallelism splits the heads: wq (or wq_b) and wkv_b are column-parallel, wo
// row-parallel with its partial sums all-reduced. The latent path (wq_a, q_norm, wkv_a,
// kv_norm) is whole on every TP rank, and each rank's gradient of it comes from its own
// heads only: a partial sum the trainer all-reduces over TP (ShardKind::kTpPartial).
// Not thread-safe (a torch module); owned by its TransformerBlock.
#pragma once

#include <torch/torch.h>

#include <vector>

#include "common/spec/job_spec.h"
#include "worker/engine/compile/region/region_fn.h"
#include "worker/engine/compile/region/region_key.h"
#include "worker/engine/model/layers/rms_norm.h"
#include "worker/engine/model/layers/rotary_embedding.h"
#include "worker/engine/model/regions/region_factory.h"
#include "worker/engine/parallel/mesh/parallel_context.h"

namespace trainyard::engine {

class LatentAttentionImpl : public torch::nn::Module {
 public:
  LatentAttentionImpl(const spec::ModelSpec& config, ParallelContext ctx = {},
                      RegionFactory& regions = EagerRegionFactory(), int layer = -1);

  // x: [batch, seq, dim] -> [batch, seq, dim].
  torch::Tensor forward(const torch::Tensor& x, const RotaryEmbedding& rope);

  // The region's parameters, in its order: wq | (wq_a, q_norm, wq_b), then wkv_a,
  // kv_norm, wkv_b, wo.
  std::vector<torch::Tensor> Params() const;

  // wq with q_lora_rank 0; wq_a, q_norm and wq_b otherwise (the others stay null).
  torch::nn::Linear wq{nullptr}, wq_a{nullptr}, wq_b{nullptr}, wkv_a{nullptr}, wkv_b{nullptr}, wo{nullptr};
  // The two latents' norms: their weights only (the region normalises inside).
  RMSNorm q_norm{nullptr}, kv_norm{nullptr};

 private:
  ParallelContext ctx_;
  spec::ModelSpec config_;
  int64_t local_heads_;
  RopeTableCache rope_tables_;
  RegionCall region_;
};
TORCH_MODULE(LatentAttention);

namespace regions {

// The softmax scale of a latent attention head (see the file comment).
double LatentAttentionScale(const spec::ModelSpec& c);

// The mla_attention region: inputs x [b, t, dim], cos/sin [t, qk_rope_head_dim]
// (RotaryEmbedding tables, fp32); params as LatentAttentionImpl::Params. Output: this
// TP rank's partial [b, t, dim]. Attention is SDPA, causal, on local_heads heads.
compile::RegionKey LatentAttentionKey(const spec::ModelSpec& c, int tp);
compile::RegionFn LatentAttention(const spec::ModelSpec& c, int64_t local_heads);

}  // namespace regions

}  // namespace trainyard::engine
