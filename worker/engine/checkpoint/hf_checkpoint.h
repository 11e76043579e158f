// Initial weights from a Hugging Face model folder (what save_pretrained writes:
// config.json, and model.safetensors or model-*-of-*.safetensors shards with
// model.safetensors.index.json), for the deepseek_v3 and qwen3_moe architectures.
// Each engine tensor maps to its HF tensor through export_names.h's table (the one the
// export writes with): grouped experts from the per-expert tensors, Qwen's RoPE rows
// permuted back from rotate-half order. Each rank reads only the byte ranges of its
// own shard (rows, column ranges or experts) with pread, converting bf16/fp16 files to
// the model's dtype; the model's keys must agree with config.json first
// (spec/hf_config.h). Free functions; not thread-safe with respect to `state`'s tensors.
#pragma once

#include <string>
#include <vector>

#include "worker/engine/checkpoint/train_state.h"

namespace trainyard::engine {

// Copies the folder's weights into every tensor of `state` (CollectModelState: this
// rank's shards). `model` is the job's resolved model, checked against config.json.
// A Qwen3-MoE folder has no router bias: the engine's aux-free bias starts at zero.
// Returns what it loaded, for the log line. Throws std::runtime_error naming the
// folder, the file and the tensor: config.json disagreeing with the model, no weights
// file, a malformed index or header, a tensor missing, of another shape or of a
// non-float dtype, and a tensor in the folder the model has no place for (except
// DeepSeek-V3's multi-token-prediction layers past the last layer, which are skipped).
std::string LoadHuggingFaceWeights(const std::string& folder, const spec::ModelSpec& model,
                                   const std::vector<StateTensor>& state);

}  // namespace trainyard::engine
