#include "worker/engine/train/flops_model.h"

namespace trainyard::engine {

FlopsModel FlopsModel::FromConfig(const ModelConfig& m, int64_t seq_len) {
  const int64_t d = m.dim, hd = m.head_dim();
  const int64_t attn = d * (m.n_heads * hd) * 2 + d * (m.n_kv_heads * hd) * 2;
  const int64_t norms = 2 * d;
  const int64_t dense_ffn = 3 * d * m.ffn_hidden;
  const int64_t expert = 3 * d * m.expert_hidden;
  const int64_t router = d * m.n_routed_experts;
  const int64_t shared = expert * m.n_shared_experts;

  FlopsModel f;
  f.embedding_params = int64_t{m.vocab_size} * d;
  const int64_t output = int64_t{m.vocab_size} * d;
  const int64_t n_moe = m.n_moe_layers();
  const int64_t n_dense = m.n_dense_layers;
  const int64_t dense_layer = attn + norms + dense_ffn;
  const int64_t moe_total = attn + norms + router + shared + expert * m.n_routed_experts;
  const int64_t moe_active = attn + norms + router + shared + expert * m.top_k;
  f.total_params = f.embedding_params + output + d + n_dense * dense_layer + n_moe * moe_total;
  f.active_params = output + d + n_dense * dense_layer + n_moe * moe_active;
  f.flops_per_token = 6.0 * static_cast<double>(f.active_params) +
                      12.0 * m.n_layers * m.n_heads * hd * static_cast<double>(seq_len);
  return f;
}

}  // namespace trainyard::engine
