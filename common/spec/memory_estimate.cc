#include "common/spec/memory_estimate.h"

#include <algorithm>

namespace trainyard::spec {

ParameterCounts CountParameters(const ModelSpec& m) {
  const int64_t d = m.dim, hd = m.head_dim();
  ParameterCounts c;
  c.embedding = int64_t{m.vocab_size} * d;
  c.output = int64_t{m.vocab_size} * d;
  c.final_norm = d;
  c.attention = d * (m.n_heads * hd) * 2 + d * (m.n_kv_heads * hd) * 2;
  c.layer_norms = 2 * d;
  c.dense_ffn = 3 * d * m.ffn_hidden;
  c.expert = 3 * d * m.expert_hidden;
  c.router = d * m.n_routed_experts;
  c.shared = c.expert * m.n_shared_experts;
  c.total = c.embedding + c.output + c.final_norm + int64_t{m.n_dense_layers} * c.dense_layer() +
            int64_t{m.n_moe_layers()} * c.moe_layer(m.n_routed_experts);
  return c;
}

MemoryEstimate EstimateRankMemory(const JobSpec& spec) {
  const ModelSpec& m = spec.model;
  const ParameterCounts c = CountParameters(m);
  const double d = m.dim, vocab = m.vocab_size;
  const double tp = std::max(1, spec.parallelism.tp), ep = std::max(1, spec.parallelism.ep);
  const double n_moe = m.n_moe_layers(), n_dense = m.n_dense_layers;

  MemoryEstimate e;
  e.total_params = static_cast<double>(c.total);
  // Embedding, head and norms replicated; attention, dense FFN, shared experts and
  // router split by TP; n_routed_experts / ep routed experts a rank.
  e.rank_params = static_cast<double>(c.embedding + c.output + c.final_norm) +
                  n_dense * (static_cast<double>(c.attention + c.dense_ffn) / tp + c.layer_norms) +
                  n_moe * (static_cast<double>(c.attention + c.shared + c.router) / tp + c.layer_norms +
                           static_cast<double>(c.expert) * m.n_routed_experts / ep);
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
