// Causal grouped-query self-attention with RoPE. Query head h reads KV head
// h / (n_heads / n_kv_heads); scores scale by 1/sqrt(head_dim). Linear layers have no
// bias. With tensor parallelism the heads split across the TP group: wq/wk/wv are
// column-parallel (this rank's n_heads/tp query and n_kv_heads/tp KV heads, which keeps
// the GQA pairing local), wo is row-parallel and its partial sums are all-reduced.
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

// A linear layer without bias (no layer of the model has one).
torch::nn::Linear NoBias(int64_t in, int64_t out);

class AttentionImpl : public torch::nn::Module {
 public:
  // c's dim, n_heads, n_kv_heads and head_dim(); with c.qk_norm() (qwen3_moe) each query
  // and key head is RMS-normalised (weights q_norm, k_norm over head_dim) before RoPE.
  AttentionImpl(const spec::ModelSpec& c, ParallelContext ctx = {}, RegionFactory& regions = EagerRegionFactory(),
                int layer = -1);

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
  RMSNorm q_norm{nullptr}, k_norm{nullptr};  // qwen3_moe only: weights the region applies

  // The region's parameters: wq, wk, wv, wo (then q_norm, k_norm).
  std::vector<torch::Tensor> Params() const;

 private:
  ParallelContext ctx_;
  double qk_norm_eps_ = 0;  // > 0: the per-head q/k RMSNorm's eps
  int64_t n_heads_;         // local to this TP rank
  int64_t n_kv_heads_;
  int64_t head_dim_;
  int64_t dim_;

  RopeTableCache rope_tables_;
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
// qk_norm_eps > 0: params 4 and 5 are the per-head q and k RMSNorm weights, applied
// to the projected heads before RoPE (Qwen3).
compile::RegionKey AttentionKey(int64_t dim, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, int64_t query_block,
                                int tp, double qk_norm_eps = 0);
compile::RegionFn Attention(int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, int64_t query_block,
                            double qk_norm_eps = 0);

}  // namespace regions

}  // namespace trainyard::engine
