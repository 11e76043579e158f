// A Hugging Face model folder's config.json and the engine's model keys, both ways,
// without torch: the two architectures transformers has a class for (deepseek_v3:
// DeepseekV3ForCausalLM, qwen3_moe: Qwen3MoeForCausalLM). The mapping table is in
// docs/checkpoints.md, "Hugging Face config.json".
//
// Values compare exactly (as the field's kind: int, double, bool, string). A double
// that Python's json module wrote (the shortest text that reads back the same) parses
// to the very double the engine's TOML or JSON reader makes of the same text, so
// norm_eps 1e-6 in a job file equals rms_norm_eps 1e-06 in config.json; a value that
// differs in the last bit is a different model and is reported as such.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/spec/job_spec.h"
#include "common/spec/schema.h"
#include "common/spec/spec_error.h"
#include "common/spec/spec_input.h"

namespace trainyard::spec {

// config.json files larger than this are refused before parsing (real ones are ~2 KB).
inline constexpr std::size_t kMaxHuggingFaceConfigBytes = std::size_t{1} << 20;

// One model key that config.json determines.
struct HuggingFaceKey {
  std::string key;       // the [model] key, e.g. "dim", "head_dim"
  FieldValue value;      // in the field's kind (int, double, bool or string)
  std::string hf_field;  // where it came from: "hidden_size", "rope_parameters.factor"
  std::string hf_text;   // that field's value as config.json has it, for messages
};

// Reads and checks `config_json_path` (at most kMaxHuggingFaceConfigBytes; UTF-8 JSON
// object) into every model key it determines, in ForEachField's order. Errors (kind
// kInvalid, origin the path; kNotFound when the file cannot be opened) name the
// config.json field and its value: a wrong type, a size that is not a positive integer
// (or negative where 0 is allowed), a non-finite or out-of-range number, an unknown
// model_type, and whatever the engine cannot represent (tie_word_embeddings true,
// attention_bias true, hidden_act not silu, a sliding window in use, a RoPE type other
// than default and yarn, deepseek_v3's rope_interleave false or mscale !=
// mscale_all_dim, qwen3_moe's mlp_only_layers other than [0 .. k-1] or
// decoder_sparse_step other than 1).
Result<std::vector<HuggingFaceKey>> ReadHuggingFaceConfig(const std::string& config_json_path);
// The same on text already read; `source_name` stands for the path in errors.
Result<std::vector<HuggingFaceKey>> ParseHuggingFaceConfig(std::string_view text, const std::string& source_name);

// True when `path` is a directory holding config.json and no manifest.json (which marks
// the engine's own checkpoint directories).
bool IsHuggingFaceFolder(const std::string& path);

// Fills `input`'s model keys from `folder`/config.json. For each key config.json
// determines: a key the input gives must equal config.json's value; a key it does not
// give is set, with origin "<folder>/config.json (<field>)", and when the input names
// model.preset, that preset's value must equal config.json's too (the preset would
// otherwise be silently overridden). model.preset itself is left alone (Resolve's
// default applies). Errors name both values and where each came from; `input` may be
// partly filled after an error.
std::optional<SpecError> ApplyHuggingFaceConfig(const std::string& folder, SpecInput& input);

// ApplyHuggingFaceConfig when `input`'s checkpoint.initial_load_path is a Hugging Face
// folder; nothing otherwise. Every reader of a job file calls it (LoadJobFile, and the
// submit path's sweep reader for its base job).
std::optional<SpecError> ApplyHuggingFaceFolder(SpecInput& input);

// The resolved `model` against `folder`/config.json: every key config.json determines
// must be equal (head_dim as the width in use, so 0 equals dim / n_heads). For the
// engine's loader, since a job submitted through the API was not filled by the CLI.
std::optional<SpecError> CheckAgainstHuggingFaceConfig(const std::string& folder, const ModelSpec& model);

// The config.json transformers (5.x) loads with AutoConfig.from_pretrained for
// `spec`'s model (its mapping is ReadHuggingFaceConfig's, reversed). Error for
// model.architecture "trainyard" (no transformers class) and for a model transformers
// cannot express (a qwen3_moe with shared experts, expert groups, route_scale != 1,
// sigmoid scores or YaRN).
Result<std::string> HuggingFaceConfigJson(const JobSpec& spec);

}  // namespace trainyard::spec
