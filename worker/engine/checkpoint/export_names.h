// What `trainyard export` writes, tensor by tensor, and under which names: the model's
// parameters and buffers of a checkpoint (never optim.* or rng.*), either under the
// checkpoint's own torchtitan names or under Hugging Face DeepSeek-V3 names
// (DeepseekV3ForCausalLM's layout, following torchtitan's deepseek_v3
// state_dict_adapter.py; the table is in docs/checkpoints.md, "Export"). The grouped
// expert tensors [E, out, in] become E tensors [out, in] (already HF Linear's
// orientation, so nothing is transposed). No torch; pure functions, thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "worker/engine/checkpoint/checkpoint_index.h"

namespace trainyard::engine {

enum class ExportNames { kTorchtitan, kHuggingFace };

// "torchtitan" or "hf"; false for anything else.
bool ParseExportNames(std::string_view text, ExportNames* out);
const char* ExportNamesText(ExportNames names);

// One tensor of the export file: the window [window_offsets, + window_shape) of the
// global tensor `source`, stored as `shape` (the window's shape, or without its leading
// 1 for one expert of a grouped tensor: same bytes, same order).
struct ExportTensor {
  std::string name;
  std::string source;
  SafetensorsDtype dtype = SafetensorsDtype::kF32;
  std::vector<int64_t> shape;
  std::vector<int64_t> window_offsets, window_shape;
};

// True for the names `trainyard export` leaves out: optimizer moments (optim.*) and RNG
// states (rng.*).
bool IsTrainingOnlyTensor(const std::string& name);

// The export of `index`'s model tensors in the writer's order (CheckpointIndex::names),
// each expert of a grouped tensor in expert order. Throws std::runtime_error naming the
// tensor when `names` is kHuggingFace and a tensor has no Hugging Face name, or a
// grouped expert tensor is not 3-D.
std::vector<ExportTensor> PlanExport(const CheckpointIndex& index, ExportNames names);

// The Hugging Face name of torchtitan `name` (`expert` >= 0: that expert of a grouped
// tensor `layers.<i>.moe.experts.w1|w2|w3`), or "" when it has none.
std::string HuggingFaceName(const std::string& name, int64_t expert = -1);

}  // namespace trainyard::engine
