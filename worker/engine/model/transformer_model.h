// The decoder: tok_embeddings → layers → norm → output (untied). Parameter names
// follow torchtitan (`layers.3.moe.experts.w1`, `layers.0.attention.wq.weight`, ...).
// Under TP/EP each rank holds its shards (parameter_sharding.h); the embedding, norms,
// output and router are whole on every rank.
// Not thread-safe (a torch module); owned by the Trainer.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "worker/engine/compile/region/region_fn.h"
#include "worker/engine/compile/region/region_key.h"
#include "worker/engine/config/engine_config.h"
#include "worker/engine/model/layers/rms_norm.h"
#include "worker/engine/model/layers/rotary_embedding.h"
#include "worker/engine/model/regions/region_factory.h"
#include "worker/engine/model/transformer_block.h"
#include "worker/engine/parallel/mesh/parallel_context.h"

namespace trainyard::engine {

struct ModelOutput {
  torch::Tensor logits;             // [batch, seq, vocab]; only when called without targets
  torch::Tensor loss;               // mean cross-entropy; only when called with targets
  torch::Tensor tokens_per_expert;  // [n_moe_layers, n_experts] int64 (empty if no MoE),
                                    // this rank's MoE tokens only, before capacity drops
  torch::Tensor dropped_tokens;     // 0-d int64: this rank's (token, expert) assignments
                                    // dropped by the capacity, summed over the MoE layers
};

struct ModelOptions {
  // Builds every region call site (null: eager, no compile layer).
  RegionFactory* regions = nullptr;
  std::string activation_checkpoint = "none";     // "none" | "full" | "selective"
  bool plant_side_effect = false;                 // test only: see MoEImpl
  std::string regions_granularity = "per_layer";  // "per_layer" | "model" (tp = 1)
  // training.mixed_precision: kFloat ("fp32") or kBFloat16 ("bf16": fp32 weights, bf16
  // compute; regions/projection.h has the policy).
  torch::ScalarType compute_dtype = torch::kFloat;
};

class TransformerModelImpl : public torch::nn::Module {
 public:
  TransformerModelImpl(const ModelConfig& config, int64_t max_seq_len, ParallelContext ctx = {},
                       ModelOptions options = {});

  // tokens: [batch, seq] int64. With targets ([batch, seq] int64) the result carries
  // the loss (the `loss` region: final norm, output, cross-entropy), else the logits.
  ModelOutput forward(const torch::Tensor& tokens, const torch::Tensor& targets = {});

  // Deterministic from `seed` alone (same on every rank): normal(0, 0.02) for
  // matrices, scaled by 1/sqrt(2·n_layers) for the residual-output projections
  // (wo, w2, output); norms to 1; expert_bias to 0. Every rank draws the full tensors
  // in the same order and keeps its shard, so any layout starts from the single-rank
  // weights.
  void InitWeights(std::uint64_t seed);

  // Applies the aux-loss-free bias update; counts: [n_moe_layers, n_experts].
  void UpdateExpertBiases(const torch::Tensor& counts, double coeff);

  const std::vector<TransformerBlock>& blocks() const { return blocks_; }
  const ModelConfig& config() const { return config_; }
  const ParallelContext& parallel() const { return ctx_; }

  // Called before each unit of the forward pass uses its parameters: 0 before the token
  // embedding, i + 1 before block i, n_layers + 1 before the final norm and output head
  // (FSDP waits for that unit's all-gather there: fully_sharded.h). Empty: none.
  void set_before_unit(std::function<void(int)> hook) { before_unit_ = std::move(hook); }

  torch::nn::Embedding tok_embeddings{nullptr};
  torch::nn::ModuleList layers;
  RMSNorm norm{nullptr};
  torch::nn::Linear output{nullptr};

 private:
  ModelConfig config_;
  ParallelContext ctx_;
  std::function<void(int)> before_unit_;
  RotaryEmbedding rope_;
  bool full_checkpoint_;
  torch::ScalarType compute_dtype_;  // the residual stream's dtype (ModelOptions::compute_dtype)
  RegionCall loss_region_;
  std::vector<TransformerBlock> blocks_;
};
TORCH_MODULE(TransformerModel);

namespace regions {

// The loss region. inputs: h [b, t, dim], targets [b, t] int64; params: final norm
// weight, output weight.
compile::RegionKey LossKey(int64_t dim, int64_t vocab, double eps);
compile::RegionFn Loss(double eps);

}  // namespace regions

}  // namespace trainyard::engine
