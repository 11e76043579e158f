#include "worker/engine/train/flops_model.h"

#include "common/spec/memory_estimate.h"

namespace trainyard::engine {

FlopsModel FlopsModel::FromConfig(const ModelConfig& m, int64_t seq_len) {
  // The parameter count is the spec core's (the controller's memory estimate uses it too).
  const spec::ParameterCounts c = spec::CountParameters(m);
  FlopsModel f;
  f.embedding_params = c.embedding;
  f.total_params = c.total;
  f.active_params = c.output + c.final_norm + int64_t{m.n_dense_layers} * c.dense_layer() +
                    int64_t{m.n_moe_layers()} * c.moe_layer(m.top_k);
  // Attention's scores and weighted sum: 6 FLOPs a multiply-add over the query/key width
  // and the value width (GQA: 12·head_dim; latent attention: 6·(qk + v)).
  f.flops_per_token = 6.0 * static_cast<double>(f.active_params) +
                      6.0 * m.n_layers * m.n_heads * static_cast<double>(m.qk_head_dim() + m.value_head_dim()) *
                          static_cast<double>(seq_len);
  return f;
}

}  // namespace trainyard::engine
