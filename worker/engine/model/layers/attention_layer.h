// Causal grouped-query self-attention with RoPE. Query head h reads KV head
// h / (n_heads / n_kv_heads); scores scale by 1/sqrt(head_dim). Linear layers have no
// bias. With tensor parallelism the heads split across the TP group: wq/wk/wv are
// column-parallel (this rank's n_heads/tp query and n_kv_heads/tp KV heads, which keeps
// the GQA pairing local), wo is row-parallel and its partial sums are all-reduced.
// Not thread-safe (a torch module); owned by its TransformerBlock.
#pragma once

#include <torch/torch.h>

#include <vector>

#include "worker/engine/compile/region/region_fn.h"
#include "worker/engine/compile/region/region_key.h"
#include "worker/engine/model/layers/rotary_embedding.h"
#include "worker/engine/model/regions/region_factory.h"
#include "worker/engine/parallel/mesh/parallel_context.h"

namespace trainyard::engine {

class AttentionImpl : public torch::nn::Module {
 public:
  AttentionImpl(int64_t dim, int64_t n_heads, int64_t n_kv_heads, ParallelContext ctx = {},
                RegionFactory& regions = EagerRegionFactory(), int layer = -1);

  // x: [batch, seq, dim] -> [batch, seq, dim].
  torch::Tensor forward(const torch::Tensor& x, const RotaryEmbedding& rope);

  // Query positions per causal block of the fused CPU kernel (see regions::Attention).
  static constexpr int64_t kQueryBlock = 64;

  // The attention region's inputs after x: the RoPE tables in fp32. A cache of
  // constants (never written in place), rebuilt only when t or the device changes;
  // handed to the region as inputs so the region stays pure.
  const std::vector<torch::Tensor>& Constants(int64_t t, const RotaryEmbedding& rope, const torch::TensorOptions& opts);
  // The region key and function (a block region under regions = "model" embeds them).
  compile::RegionKey Key() const;
  compile::RegionFn Fn() const;

  torch::nn::Linear wq{nullptr}, wk{nullptr}, wv{nullptr}, wo{nullptr};

 private:
  ParallelContext ctx_;
  int64_t n_heads_;  // local to this TP rank
  int64_t n_kv_heads_;
  int64_t head_dim_;
  int64_t dim_;

  std::vector<torch::Tensor> constants_;
  int64_t constants_t_ = -1;
  RegionCall region_;
};
TORCH_MODULE(Attention);

namespace regions {

// The attention region: causal grouped-query attention on this TP rank's heads.
// inputs: x [b, t, dim], cos/sin [t, head_dim] (RotaryEmbedding tables, fp32). params:
// wq, wk, wv, wo weights. The q|k|v projection, the trainyard::causal_attention
// operator, the output projection. On fp32 CPU the operator's kernel is the fused one,
// in blocks of `query_block` query positions; everywhere else (bf16, CUDA, the kernel
// switched off) its reference: RoPE and then SDPA (kernels/reference_ops.h). The two
// agree to 1e-5 of their scale, output and gradients (SdpaAgainstFusedTest), and both
// match per-head loops (AttentionPathTest).
compile::RegionKey AttentionKey(int64_t dim, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, int64_t query_block,
                                int tp);
compile::RegionFn Attention(int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, int64_t query_block);

}  // namespace regions

}  // namespace trainyard::engine
