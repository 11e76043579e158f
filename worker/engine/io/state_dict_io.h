// Full (unsharded) model state under torchtitan names: every parameter plus the
// expert_bias buffers. The file format (safetensors) is the caller's business; these
// functions only move between full tensors and this rank's shards, for any
// (dp, tp, ep) layout, using the layout rules of parameter_sharding.h.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "worker/engine/model/transformer_model.h"
#include "worker/engine/parallel/mesh/process_mesh.h"

namespace trainyard::engine {

using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;

// Collective over the world: every rank must call it, in the same state. Each shard's
// owner (OwnsShard) writes it into a zero full tensor and one world sum per tensor
// assembles it; adding zeros is exact, so the result is bit-identical to the shards.
// The sums run on the model's device (NCCL on CUDA). Returns the full tensors (fp32,
// contiguous, on the host, ready for WriteSafetensors) on every rank, in
// named_parameters then named_buffers order.
NamedTensors GatherFullState(TransformerModelImpl& model, ProcessMesh& mesh);

// Copies this rank's shard of each full tensor into the model (no collectives).
// `tensors` must hold exactly the model's names with full shapes; any other dtype or
// device is converted. Throws std::invalid_argument naming the tensor on a missing or unknown
// name or a wrong shape.
void LoadFullState(TransformerModelImpl& model, const NamedTensors& tensors);

}  // namespace trainyard::engine
