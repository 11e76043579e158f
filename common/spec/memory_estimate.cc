#include "common/spec/memory_estimate.h"

#include <algorithm>

namespace trainyard::spec {

MemoryEstimate EstimateRankMemory(const JobSpec& spec) {
  const ModelSpec& m = spec.model;
  const double d = m.dim, hd = m.head_dim(), vocab = m.vocab_size;
  const double tp = std::max(1, spec.parallelism.tp), ep = std::max(1, spec.parallelism.ep);
  const double attn = d * (m.n_heads * hd) * 2 + d * (m.n_kv_heads * hd) * 2;
  const double norms = 2 * d;
  const double dense_ffn = 3 * d * m.ffn_hidden;
  const double expert = 3 * d * m.expert_hidden;
  const double router = d * m.n_routed_experts;
  const double shared = expert * m.n_shared_experts;
  const double n_moe = m.n_moe_layers(), n_dense = m.n_dense_layers;
  const double embed_and_output = 2 * vocab * d + d;  // + the final norm

  MemoryEstimate e;
  e.total_params = embed_and_output + n_dense * (attn + norms + dense_ffn) +
                   n_moe * (attn + norms + router + shared + expert * m.n_routed_experts);
  e.rank_params = embed_and_output + n_dense * ((attn + dense_ffn) / tp + norms) +
                  n_moe * ((attn + shared + router) / tp + norms + expert * m.n_routed_experts / ep);
  e.state_bytes = e.rank_params * 16;

  const double batch = spec.training.batch_size, seq = spec.training.seq_len;
  const double tokens = batch * seq;
  const double moe_hidden = static_cast<double>(m.top_k + m.n_shared_experts) * m.expert_hidden;
  const double scores = 2 * (m.n_heads / tp) * seq * seq * batch;  // per layer
  const double dense_layer = tokens * (16 * d + 3 * m.ffn_hidden) + scores;
  const double moe_layer = tokens * (16 * d + 3 * moe_hidden) + scores;
  const double layers = n_dense * dense_layer + n_moe * moe_layer;
  const double logits = tokens * 3 * vocab;
  double floats = layers + logits;
  const std::string& mode = spec.activation_checkpoint.mode;
  if (mode == "full") {
    floats = m.n_layers * tokens * d + std::max(dense_layer, moe_layer) + logits;
  } else if (mode == "selective") {
    floats = layers / 2 + logits;
  }
  e.activation_bytes = floats * 4;
  return e;
}

}  // namespace trainyard::spec
