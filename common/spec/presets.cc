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

const std::vector<Preset>& Presets() {
  static const auto* presets = new std::vector<Preset>{
      {"debug", DebugModel(), 256, 8},
      {"tiny", TinyModel(), 32, 4},
      {"gpu_small", GpuSmallModel(), 2048, 8},
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
    SpecError e = Invalid("model.preset", "one_of",
                          "model.preset: unknown preset \"" + Quote(preset_name) + "\" (known: " +
                              KnownPresets() + ")");
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
