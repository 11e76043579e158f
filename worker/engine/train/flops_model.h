// Parameter counts and model FLOPs per token (docs/architecture.md, "Model and numerical conventions"):
//   FLOPs/token = 6·(active non-embedding params + output projection)
//                 + 12·n_layers·n_heads·head_dim·seq_len
// "Active" counts top_k of the n_routed_experts routed experts per MoE layer.
// Pure arithmetic on the config; thread-safe.
#pragma once

#include <cstdint>

#include "worker/engine/config/engine_config.h"

namespace trainyard::engine {

struct FlopsModel {
  int64_t total_params = 0;      // every parameter, embedding included
  int64_t embedding_params = 0;  // tok_embeddings only
  int64_t active_params = 0;     // non-embedding params one token touches (incl. output)
  double flops_per_token = 0;

  static FlopsModel FromConfig(const ModelConfig& model, int64_t seq_len);
};

}  // namespace trainyard::engine
