#include "worker/engine/train/flops_model.h"

#include "common/spec/memory_estimate.h"

namespace trainyard::engine {

FlopsModel FlopsModel::FromConfig(const ModelConfig& m, int64_t seq_len) {
  // The parameter and FLOP counts are the spec core's (the controller's memory estimate
  // and the pipeline split use them too).
  const spec::ParameterCounts c = spec::CountParameters(m);
  const spec::FlopCounts flops = spec::CountFlops(m, seq_len);
  FlopsModel f;
  f.embedding_params = c.embedding;
  f.total_params = c.total;
  f.active_params = flops.active_params;
  f.flops_per_token = flops.per_token;
  return f;
}

}  // namespace trainyard::engine
