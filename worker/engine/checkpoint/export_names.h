// What `trainyard export` writes, tensor by tensor, and under which names: the model's
// parameters and buffers of a checkpoint (never optim.* or rng.*), either under the
// checkpoint's own torchtitan names or under Hugging Face names (DeepseekV3ForCausalLM's
// or Qwen3MoeForCausalLM's layout, following torchtitan's state_dict_adapter.py files;
// the table is in docs/checkpoints.md, "Export"). The grouped expert tensors
// [E, out, in] become E tensors [out, in] (already HF Linear's orientation, so nothing
// is transposed). Qwen's attention rotates half-split pairs (i, i + d/2) where the
// engine rotates adjacent ones (2i, 2i + 1), so its query/key rows (and q/k norms)
// are permuted within each head. The same table serves the import of a Hugging Face
// checkpoint (hf_checkpoint.h). No torch; pure functions, thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "worker/engine/checkpoint/checkpoint_index.h"

namespace trainyard::engine {

enum class ExportNames { kTorchtitan, kHuggingFace };

// Which Hugging Face model class the names follow. The tensor names tell them apart:
// only Qwen3-MoE has per-head key norms (attention.k_norm).
enum class HfFlavour { kDeepseekV3, kQwen3Moe };

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
  // Empty: the window as it is. Else row r (dim 0) of the stored tensor is the
  // window's row row_order[r] (Qwen's RoPE rows).
  std::vector<int64_t> row_order;
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
std::string HuggingFaceName(const std::string& name, int64_t expert = -1, HfFlavour flavour = HfFlavour::kDeepseekV3);

// "layers.<i>.moe.experts.w1|w2|w3": one [E, out, in] tensor that HF stores per expert.
bool IsGroupedExperts(const std::string& name);

// True for the tensors whose rows the Qwen flavour permutes within each head:
// attention.wq/wk (heads of `head_dim` rows) and attention.q_norm/k_norm (one head).
bool HasRotateHalfRows(const std::string& name, HfFlavour flavour);

// Hugging Face's row k of a head of `head_dim` rows is the engine's row order[k]:
// 0, 2, 4, ..., then 1, 3, 5, .... `rows` is a whole number of heads.
std::vector<int64_t> RotateHalfRowOrder(int64_t rows, int64_t head_dim);

}  // namespace trainyard::engine
