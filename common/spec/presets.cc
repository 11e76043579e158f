#include "common/spec/presets.h"

#include <algorithm>
#include <optional>

#include "common/spec/overrides.h"
#include "common/spec/rules.h"

namespace trainyard::spec {
namespace {

struct Preset {
  const char* name;
  ModelSpec model;
  int seq_len;
  int batch_size;
};

ModelSpec DebugModel() {
  ModelSpec m;
  m.vocab_size = 2048;
  m.dim = 256;
  m.n_layers = 4;
  m.n_dense_layers = 1;
  m.n_heads = 8;
  m.n_kv_heads = 4;
  m.ffn_hidden = 768;
  m.n_routed_experts = 8;
  m.top_k = 2;
  m.n_shared_experts = 1;
  m.expert_hidden = 256;
  m.score_func = "sigmoid";
  m.route_norm = true;
  m.route_scale = 1.0;
  m.rope_theta = 10000.0;
  m.norm_eps = 1e-5;
  m.load_balance_coeff = 1e-3;
  return m;
}

ModelSpec TinyModel() {
  ModelSpec m = DebugModel();
  m.vocab_size = 256;
  m.dim = 64;
  m.n_layers = 2;
  m.n_dense_layers = 1;
  m.n_heads = 4;
  m.n_kv_heads = 2;
  m.ffn_hidden = 128;
  m.n_routed_experts = 4;
  m.top_k = 2;
  m.n_shared_experts = 1;
  m.expert_hidden = 32;
  return m;
}

// A GPU-sized model for benchmarks against PyTorch (bench/peers/): about 288 M
// parameters (67 M of them the embedding and output head), 100 M active per token;
// 16,384 tokens a step. Same code paths as debug (1 dense layer, then MoE layers with
// 16 routed experts, top-2 sigmoid routing and one shared expert); head_dim 64.
ModelSpec GpuSmallModel() {
  ModelSpec m = DebugModel();
  m.vocab_size = 32768;
  m.dim = 1024;
  m.n_layers = 8;
  m.n_dense_layers = 1;
  m.n_heads = 16;
  m.n_kv_heads = 8;
  m.ffn_hidden = 2816;
  m.n_routed_experts = 16;
  m.top_k = 2;
  m.n_shared_experts = 1;
  m.expert_hidden = 512;
  return m;
}

// deepseek_v3 small enough for CPU tests: every path of the architecture on debug's
// scale. Multi-head latent attention with a low-rank query (q_lora_rank 64), a KV
// latent of 64, heads of 32 + 16 (RoPE) query/key and 32 value dims; YaRN RoPE scaled
// 4x past an original length of 128 (the preset trains at 256); 8 experts in 4 groups,
// each token choosing its top 2 from its best 2 groups.
ModelSpec DeepSeekV3DebugModel() {
  ModelSpec m = DebugModel();
  m.architecture = "deepseek_v3";
  m.n_kv_heads = m.n_heads;
  m.q_lora_rank = 64;
  m.kv_lora_rank = 64;
  m.qk_nope_head_dim = 32;
  m.qk_rope_head_dim = 16;
  m.v_head_dim = 32;
  m.rope_factor = 4.0;
  m.original_seq_len = 128;
  m.beta_fast = 32.0;
  m.beta_slow = 1.0;
  m.mscale = 1.0;
  m.n_expert_groups = 4;
  m.n_limited_groups = 2;
  m.route_scale = 2.5;
  return m;
}

// torchtitan's deepseek_v3 "16B" flavour (DeepSeek-V2-Lite/DeepSeek-MoE-16B's shape):
// latent attention with a plain query, YaRN 40x past 4096 with mscale 0.70, 64 experts
// top-6 by softmax plus 2 shared, 1 dense layer; HF's rms_norm_eps 1e-6.
ModelSpec DeepSeekV3_16B() {
  ModelSpec m;
  m.architecture = "deepseek_v3";
  m.vocab_size = 102400;
  m.dim = 2048;
  m.n_layers = 27;
  m.n_dense_layers = 1;
  m.n_heads = 16;
  m.n_kv_heads = 16;
  m.ffn_hidden = 10944;
  m.n_routed_experts = 64;
  m.top_k = 6;
  m.n_shared_experts = 2;
  m.expert_hidden = 1408;
  m.score_func = "softmax";
  m.route_norm = false;
  m.route_scale = 1.0;
  m.rope_theta = 10000.0;
  m.norm_eps = 1e-6;
  m.load_balance_coeff = 1e-3;
  m.q_lora_rank = 0;
  m.kv_lora_rank = 512;
  m.qk_nope_head_dim = 128;
  m.qk_rope_head_dim = 64;
  m.v_head_dim = 128;
  m.rope_factor = 40.0;
  m.original_seq_len = 4096;
  m.beta_fast = 32.0;
  m.beta_slow = 1.0;
  m.mscale = 0.70;
  return m;
}

// DeepSeek-V3 671B (torchtitan's "671B", HF's deepseek-ai/DeepSeek-V3 config without the
// multi-token-prediction layer): low-rank queries, 256 experts top-8 by sigmoid in 8
// groups choosing from 4, route_scale 2.5, 3 dense layers.
ModelSpec DeepSeekV3_671B() {
  ModelSpec m = DeepSeekV3_16B();
  m.vocab_size = 129280;
  m.dim = 7168;
  m.n_layers = 61;
  m.n_dense_layers = 3;
  m.n_heads = 128;
  m.n_kv_heads = 128;
  m.ffn_hidden = 18432;
  m.n_routed_experts = 256;
  m.top_k = 8;
  m.n_shared_experts = 1;
  m.expert_hidden = 2048;
  m.score_func = "sigmoid";
  m.route_norm = true;
  m.route_scale = 2.5;
  m.q_lora_rank = 1536;
  m.mscale = 1.0;
  m.n_expert_groups = 8;
  m.n_limited_groups = 4;
  return m;
}

// Qwen3-MoE at debug's scale: GQA with per-head q/k norms and heads wider than dim /
// n_heads (head_dim 48), every layer MoE (no dense, no shared experts), softmax top-2
// renormalised, rope_theta 1e6. Qwen3's router has no bias, so the aux-free balancing
// bias is off (load_balance_coeff 0): a trained model stays a Qwen3MoeForCausalLM.
ModelSpec Qwen3MoeDebugModel() {
  ModelSpec m = DebugModel();
  m.architecture = "qwen3_moe";
  m.head_dim_override = 48;
  m.n_dense_layers = 0;
  m.n_shared_experts = 0;
  m.score_func = "softmax";
  m.route_norm = true;
  m.route_scale = 1.0;
  m.rope_theta = 1e6;
  m.norm_eps = 1e-6;
  m.load_balance_coeff = 0;
  return m;
}

// Qwen/Qwen3-30B-A3B's config.json: 48 layers, 32 query and 4 KV heads of 128, 128
// experts top-8 of hidden 768, vocab 151936.
ModelSpec Qwen3_30B_A3B() {
  ModelSpec m = Qwen3MoeDebugModel();
  m.vocab_size = 151936;
  m.dim = 2048;
  m.n_layers = 48;
  m.n_heads = 32;
  m.n_kv_heads = 4;
  m.head_dim_override = 128;
  m.ffn_hidden = 6144;  // config.json's intermediate_size (no layer is dense)
  m.n_routed_experts = 128;
  m.top_k = 8;
  m.expert_hidden = 768;
  return m;
}

// Qwen/Qwen3-235B-A22B's config.json: 94 layers, 64 query and 4 KV heads of 128, 128
// experts top-8 of hidden 1536.
ModelSpec Qwen3_235B_A22B() {
  ModelSpec m = Qwen3_30B_A3B();
  m.dim = 4096;
  m.n_layers = 94;
  m.n_heads = 64;
  m.ffn_hidden = 12288;
  m.expert_hidden = 1536;
  return m;
}

const std::vector<Preset>& Presets() {
  static const auto* presets = new std::vector<Preset>{
      {"debug", DebugModel(), 256, 8},
      {"tiny", TinyModel(), 32, 4},
      {"gpu_small", GpuSmallModel(), 2048, 8},
      {"deepseek_v3_debug", DeepSeekV3DebugModel(), 256, 8},
      {"deepseek_v3_16b", DeepSeekV3_16B(), 4096, 1},
      {"deepseek_v3_671b", DeepSeekV3_671B(), 4096, 1},
      {"qwen3_moe_debug", Qwen3MoeDebugModel(), 256, 8},
      {"qwen3_30b_a3b", Qwen3_30B_A3B(), 4096, 1},
      {"qwen3_235b_a22b", Qwen3_235B_A22B(), 4096, 1},
  };
  return *presets;
}

std::string KnownPresets() {
  std::string out;
  for (const Preset& p : Presets()) out += (out.empty() ? "" : ", ") + std::string(p.name);
  return out;
}

}  // namespace

std::vector<std::string> PresetNames() {
  std::vector<std::string> out;
  for (const Preset& p : Presets()) out.emplace_back(p.name);
  return out;
}

Result<JobSpec> Resolve(const SpecInput& input) {
  std::string preset_name = kDefaultPreset;
  std::string preset_origin;
  if (const Assignment* a = input.Find("model", "preset")) {
    preset_name = std::get<std::string>(a->value);
    preset_origin = a->origin;
  }
  const Preset* preset = nullptr;
  for (const Preset& p : Presets()) {
    if (preset_name == p.name) preset = &p;
  }
  if (preset == nullptr) {
    SpecError e =
        Invalid("model.preset", "one_of",
                "model.preset: unknown preset \"" + Quote(preset_name) + "\" (known: " + KnownPresets() + ")");
    e.origin = preset_origin;
    return e;
  }
  JobSpec spec;
  spec.model = preset->model;
  spec.model.preset = preset->name;
  spec.training.seq_len = preset->seq_len;
  spec.training.batch_size = preset->batch_size;
  for (const Assignment& a : input.assignments()) SetField(spec, a.field->section, a.field->key, a.value);
  if (input.Find("training", "warmup_steps") == nullptr) {
    spec.training.warmup_steps = std::max(0, std::min(kDefaultWarmupSteps, spec.training.steps));
  }
  if (input.Find("training", "step_timeout_s") == nullptr && spec.resources.device == "cuda") {
    spec.training.step_timeout_s = kDefaultCudaStepTimeoutS;
  }
  return spec;
}

Result<JobSpec> ResolveAndValidate(const SpecInput& input) {
  Result<JobSpec> spec = Resolve(input);
  if (!spec.ok()) return spec;
  if (std::optional<SpecError> e = Validate(spec.value())) {
    // Where the offending value came from: the field itself when it was given, else
    // (a rule across fields, e.g. n_heads vs a given n_kv_heads) a given key the
    // message names.
    e->origin = input.OriginOf(e->field);
    for (const Assignment& a : input.assignments()) {
      if (!e->origin.empty()) break;
      if (!a.origin.empty() && e->message.find(a.field->path()) != std::string::npos) e->origin = a.origin;
    }
    return *e;
  }
  return spec;
}

SpecInput AllKeys(const JobSpec& spec) {
  SpecInput input;
  ForEachField(spec, [&](const char* section, const char* key, const auto& member) {
    // A resolved spec may hold values Validate refuses (NaN never: Store refuses it
    // on the way in), so SetTyped cannot fail here.
    input.SetTyped(section, key, FieldValue{member}, "");
  });
  return input;
}

Result<JobSpec> FromPreset(const std::string& preset, const std::vector<std::string>& overrides) {
  SpecInput input;
  if (auto e = input.Set("model", "preset", RawValue{preset, std::nullopt}, "")) return *e;
  for (const std::string& o : overrides) {
    if (auto e = ApplyOverride(o, input)) return *e;
  }
  return ResolveAndValidate(input);
}

}  // namespace trainyard::spec
