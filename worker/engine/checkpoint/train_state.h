// The tensors a checkpoint holds for one rank, named globally: every parameter under
// its torchtitan name, AdamW's moments as optim.m.<param> / optim.v.<param>, and every
// buffer (expert_bias). Each entry is this rank's local shard with the layout facts a
// layout-independent checkpoint needs: the full shape, where the shard starts in it,
// and whether this rank is the one that writes it (OwnsShard: each element once over
// the world). Entries are handles to the live tensors (a load copies into them).
// Pure functions; not thread-safe with respect to the tensors they point at.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "worker/engine/model/transformer_model.h"
#include "worker/engine/optim/adamw.h"
#include "worker/engine/parallel/fully_sharded.h"

namespace trainyard::engine {

struct StateTensor {
  std::string name;                   // global name
  torch::Tensor local;                // this rank's shard (live)
  std::vector<int64_t> global_shape;  // the full tensor
  std::vector<int64_t> offsets;       // where `local` starts in it
  bool owned = false;                 // this rank writes it
};

// `optimizer` must have been built over model.named_parameters() in that order (as the
// Trainer does). Order: parameters, optim.m.*, optim.v.*, buffers.
std::vector<StateTensor> CollectTrainState(TransformerModelImpl& model, const AdamW& optimizer);

// The same under FSDP (fully_sharded.h): each sharded parameter and its moments as this
// rank's rows of its TP/EP-local tensor (offsets on dim 0 moved by the shard's first
// row; owned by the members of replica 0: OwnsFsdpShard), the rest as above. The
// checkpoint is the same layout-independent set of slices, so any layout resumes it.
std::vector<StateTensor> CollectShardedTrainState(TransformerModelImpl& model, const AdamW& optimizer,
                                                  const FullyShardedParameters& fsdp);

// The model's part of it alone, for a weights-only load: parameters, then buffers.
std::vector<StateTensor> CollectModelState(TransformerModelImpl& model);

}  // namespace trainyard::engine
