#include "common/spec/hf_config.h"

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <tuple>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "common/base/file_io.h"
#include "common/base/text.h"
#include "common/spec/presets.h"

namespace trainyard::spec {
namespace {

using nlohmann::json;

// Thrown inside the reader only, so each check is one line; caught at its entry.
struct HfConfigFailure {
  SpecError error;
};

std::string HfShow(const json& v) {
  // ensure_ascii: the dump is printable ASCII, so Clip may show it as it is.
  return Clip(v.dump(-1, ' ', true));
}

bool IsHfDirectory(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool IsHfRegularFile(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && !S_ISDIR(st.st_mode);
}

std::string HfConfigPath(const std::string& folder) {
  return folder + (absl::EndsWith(folder, "/") ? "" : "/") + "config.json";
}

class HfConfigReader {
 public:
  HfConfigReader(const json& root, std::string source) : root_(root), source_(std::move(source)) {}

  std::vector<HuggingFaceKey> Read() {
    const std::string model_type = String(Required(root_, "model_type"), "model_type");
    if (model_type != "deepseek_v3" && model_type != "qwen3_moe") {
      Fail("model_type = \"" + Quote(model_type) +
           "\": the engine trains deepseek_v3 (DeepseekV3ForCausalLM) and qwen3_moe (Qwen3MoeForCausalLM) only");
    }
    const bool deepseek = model_type == "deepseek_v3";
    Add("architecture", model_type, "model_type");
    Refuse("tie_word_embeddings", true, "the engine's output head is a matrix of its own");
    Refuse("attention_bias", true, "the engine's attention projections have no bias");
    if (const json* act = Optional(root_, "hidden_act")) {
      if (String(*act, "hidden_act") != "silu")
        Fail("hidden_act = " + HfShow(*act) + ": the engine's FFNs are SwiGLU (silu)");
    }

    AddInt("vocab_size", "vocab_size", 1);
    dim_ = AddInt("dim", "hidden_size", 1);
    AddInt("n_layers", "num_hidden_layers", 1);
    const int heads = AddInt("n_heads", "num_attention_heads", 1);
    AddInt("ffn_hidden", "intermediate_size", 1);
    AddInt("expert_hidden", "moe_intermediate_size", 1);
    AddInt("top_k", "num_experts_per_tok", 1);
    Add("route_norm", Bool(Required(root_, "norm_topk_prob"), "norm_topk_prob"), "norm_topk_prob");
    AddDouble("norm_eps", "rms_norm_eps", Required(root_, "rms_norm_eps"), /*min_exclusive=*/0);
    ReadRope(deepseek);
    if (deepseek) {
      ReadDeepSeekV3(heads);
    } else {
      ReadQwen3Moe(heads);
    }
    return std::move(keys_);
  }

 private:
  [[noreturn]] void Fail(const std::string& message) {
    SpecError e = Invalid("", "hf_config", message);
    e.origin = source_;
    throw HfConfigFailure{std::move(e)};
  }

  const json* Optional(const json& object, const char* name) {
    auto it = object.find(name);
    return it == object.end() || it->is_null() ? nullptr : &*it;
  }
  const json& Required(const json& object, const char* name, const std::string& prefix = "") {
    const json* v = Optional(object, name);
    if (v == nullptr) Fail("config.json has no " + prefix + name + " (or it is null)");
    return *v;
  }

  std::string String(const json& v, const std::string& field) {
    if (!v.is_string()) Fail(field + " = " + HfShow(v) + ": expected a string");
    return v.get<std::string>();
  }
  bool Bool(const json& v, const std::string& field) {
    if (!v.is_boolean()) Fail(field + " = " + HfShow(v) + ": expected true or false");
    return v.get<bool>();
  }
  int Int(const json& v, const std::string& field, int min) {
    if (!v.is_number_integer()) Fail(field + " = " + HfShow(v) + ": expected an integer");
    // nlohmann keeps a non-negative literal as unsigned, a negative one as signed.
    const bool too_big = v.is_number_unsigned() && v.get<std::uint64_t>() > std::numeric_limits<std::int32_t>::max();
    const std::int64_t i = too_big ? 0 : v.get<std::int64_t>();
    if (too_big || i < min || i > std::numeric_limits<std::int32_t>::max()) {
      Fail(field + " = " + HfShow(v) + ": expected an integer from " + std::to_string(min) + " to 2147483647");
    }
    return static_cast<int>(i);
  }
  double Double(const json& v, const std::string& field, double min_exclusive) {
    // The parser already refuses a literal past the double range (1e999); kept for
    // values that did not come from text.
    if (!v.is_number()) Fail(field + " = " + HfShow(v) + ": expected a number");
    const double d = v.get<double>();
    if (!std::isfinite(d)) Fail(field + " = " + HfShow(v) + ": expected a finite number");
    if (!(d > min_exclusive))
      Fail(field + " = " + HfShow(v) + ": expected a number above " + ToText(FieldValue{min_exclusive}));
    return d;
  }

  void Add(const std::string& key, FieldValue value, const std::string& hf_field, std::string hf_text = "") {
    if (hf_text.empty()) {
      const json* v = root_.contains(hf_field) ? &root_.at(hf_field) : nullptr;
      hf_text = v != nullptr ? HfShow(*v) : ToText(value);
    }
    keys_.push_back({key, std::move(value), hf_field, std::move(hf_text)});
  }
  int AddInt(const char* key, const char* field, int min) {
    const int v = Int(Required(root_, field), field, min);
    Add(key, v, field);
    return v;
  }
  double AddDouble(const char* key, const std::string& field, const json& v, double min_exclusive) {
    const double d = Double(v, field, min_exclusive);
    Add(key, d, field, HfShow(v));
    return d;
  }
  void Refuse(const char* field, bool bad, const char* why) {
    if (const json* v = Optional(root_, field); v != nullptr && Bool(*v, field) == bad) {
      Fail(std::string(field) + " = " + HfShow(*v) + ": " + why);
    }
  }

  // transformers 5 keeps rope_theta and the scaling in rope_parameters; 4.x and the
  // hub's own files put rope_theta at the top and the scaling in rope_scaling.
  void ReadRope(bool deepseek) {
    const json* params = Optional(root_, "rope_parameters");
    const json* scaling = Optional(root_, "rope_scaling");
    if (params != nullptr && !params->is_object())
      Fail("rope_parameters = " + HfShow(*params) + ": expected an object");
    if (scaling != nullptr && !scaling->is_object())
      Fail("rope_scaling = " + HfShow(*scaling) + ": expected an object");
    const json* theta = params != nullptr ? Optional(*params, "rope_theta") : nullptr;
    std::string theta_field = "rope_parameters.rope_theta";
    if (theta == nullptr) {
      theta = Optional(root_, "rope_theta");
      theta_field = "rope_theta";
    }
    if (theta == nullptr) Fail("config.json has no rope_parameters.rope_theta (nor a top-level rope_theta)");
    AddDouble("rope_theta", theta_field, *theta, 0);

    const json* rope = params != nullptr ? params : scaling;
    const std::string prefix = params != nullptr ? "rope_parameters." : "rope_scaling.";
    std::string type = "default";
    std::string type_field = prefix + "rope_type";
    if (rope != nullptr) {
      const json* t = Optional(*rope, "rope_type");
      if (t == nullptr) {
        t = Optional(*rope, "type");
        type_field = prefix + "type";
      }
      if (t != nullptr) type = String(*t, type_field);
    }
    if (type == "default") {
      Add("rope_factor", 1.0, rope != nullptr ? type_field : "rope_parameters",
          rope != nullptr ? "\"default\"" : "absent (no scaling)");
      return;
    }
    if (type != "yarn") {
      Fail(type_field + " = \"" + Quote(type) + "\": the engine's RoPE is default or yarn (deepseek_v3)");
    }
    if (!deepseek) {
      Fail(type_field +
           " = \"yarn\": the engine's qwen3_moe has no YaRN that matches transformers' (which scales "
           "the cos/sin tables)");
    }
    AddDouble("rope_factor", prefix + "factor", Required(*rope, "factor", prefix), 1);
    const std::string original = prefix + "original_max_position_embeddings";
    Add("original_seq_len", Int(Required(*rope, "original_max_position_embeddings", prefix), original, 1), original,
        HfShow(rope->at("original_max_position_embeddings")));
    // transformers' yarn defaults when absent: beta_fast 32, beta_slow 1.
    for (const auto& [key, name, fallback] :
         {std::tuple<const char*, const char*, double>{"beta_fast", "beta_fast", 32.0},
          std::tuple<const char*, const char*, double>{"beta_slow", "beta_slow", 1.0}}) {
      if (const json* v = Optional(*rope, name)) {
        AddDouble(key, prefix + name, *v, 0);
      } else {
        Add(key, fallback, prefix + name, "absent (transformers' default " + ToText(FieldValue{fallback}) + ")");
      }
    }
    // The engine's one mscale scales the softmax (transformers' mscale_all_dim) and
    // leaves the cos/sin tables alone, which transformers does only when mscale equals
    // mscale_all_dim (its attention factor is their ratio of the two).
    const json* mscale = Optional(*rope, "mscale");
    const json* all_dim = Optional(*rope, "mscale_all_dim");
    if (mscale == nullptr || all_dim == nullptr) {
      Fail(prefix + "mscale and " + prefix +
           "mscale_all_dim must both be given (and equal): without them transformers scales the cos/sin tables, "
           "which the engine's YaRN does not");
    }
    const double m = Double(*mscale, prefix + "mscale", 0);
    const double a = Double(*all_dim, prefix + "mscale_all_dim", 0);
    if (m != a) {
      Fail(prefix + "mscale = " + HfShow(*mscale) + " differs from " + prefix + "mscale_all_dim = " + HfShow(*all_dim) +
           ": the engine's one mscale is both (the softmax scale, cos/sin tables unscaled)");
    }
    Add("mscale", a, prefix + "mscale_all_dim", HfShow(*all_dim));
    if (const json* f = Optional(*rope, "attention_factor")) {
      Fail(prefix + "attention_factor = " + HfShow(*f) + ": the engine's YaRN has no cos/sin attention factor");
    }
  }

  void ReadDeepSeekV3(int heads) {
    if (const json* kv = Optional(root_, "num_key_value_heads")) {
      const int n = Int(*kv, "num_key_value_heads", 1);
      if (n != heads) {
        Fail("num_key_value_heads = " + std::to_string(n) + " with num_attention_heads = " + std::to_string(heads) +
             ": deepseek_v3's latent attention has one key and value per query head");
      }
      Add("n_kv_heads", n, "num_key_value_heads");
    } else {
      Add("n_kv_heads", heads, "num_attention_heads", std::to_string(heads) + " (num_key_value_heads absent)");
    }
    AddInt("n_dense_layers", "first_k_dense_replace", 0);
    AddInt("n_routed_experts", "n_routed_experts", 1);
    AddInt("n_shared_experts", "n_shared_experts", 0);
    if (const json* f = Optional(root_, "scoring_func")) {
      const std::string s = String(*f, "scoring_func");
      if (s != "sigmoid" && s != "softmax")
        Fail("scoring_func = " + HfShow(*f) + ": expected \"sigmoid\" or \"softmax\"");
      Add("score_func", s, "scoring_func");
    } else {
      Add("score_func", std::string("sigmoid"), "model_type", "\"deepseek_v3\" (sigmoid scores)");
    }
    AddDouble("route_scale", "routed_scaling_factor", Required(root_, "routed_scaling_factor"), 0);
    if (const json* q = Optional(root_, "q_lora_rank")) {
      Add("q_lora_rank", Int(*q, "q_lora_rank", 0), "q_lora_rank");
    } else {
      Add("q_lora_rank", 0, "q_lora_rank", "null");
    }
    AddInt("kv_lora_rank", "kv_lora_rank", 1);
    AddInt("qk_nope_head_dim", "qk_nope_head_dim", 1);
    AddInt("qk_rope_head_dim", "qk_rope_head_dim", 1);
    AddInt("v_head_dim", "v_head_dim", 1);
    AddInt("n_expert_groups", "n_group", 1);
    AddInt("n_limited_groups", "topk_group", 1);
    // The engine's RoPE rotates consecutive pairs, DeepSeek's released layout.
    Refuse("rope_interleave", false, "the engine's deepseek_v3 RoPE rotates interleaved pairs (rope_interleave true)");
  }

  void ReadQwen3Moe(int heads) {
    AddInt("n_kv_heads", "num_key_value_heads", 1);
    const json* local = Optional(root_, "num_local_experts");
    const json* older = Optional(root_, "num_experts");
    if (local == nullptr && older == nullptr) Fail("config.json has neither num_local_experts nor num_experts");
    if (local != nullptr && older != nullptr && *local != *older) {
      Fail("num_local_experts = " + HfShow(*local) + " differs from num_experts = " + HfShow(*older));
    }
    const char* experts_field = local != nullptr ? "num_local_experts" : "num_experts";
    AddInt("n_routed_experts", experts_field, 1);
    if (const json* h = Optional(root_, "head_dim")) {
      Add("head_dim", Int(*h, "head_dim", 1), "head_dim");
    } else {
      const int dim = dim_;
      if (dim % heads != 0) {
        Fail("config.json has no head_dim and hidden_size = " + std::to_string(dim) +
             " is not a multiple of num_attention_heads = " + std::to_string(heads));
      }
      Add("head_dim", dim / heads, "hidden_size", std::to_string(dim) + " / num_attention_heads (head_dim absent)");
    }
    if (const json* step = Optional(root_, "decoder_sparse_step");
        step != nullptr && Int(*step, "decoder_sparse_step", 0) != 1) {
      Fail("decoder_sparse_step = " + HfShow(*step) +
           ": the engine's MoE layers are every layer after the dense ones (1)");
    }
    Refuse("use_sliding_window", true, "the engine's attention is full causal attention");
    int dense = 0;
    if (const json* mlp_only = Optional(root_, "mlp_only_layers")) {
      if (!mlp_only->is_array()) Fail("mlp_only_layers = " + HfShow(*mlp_only) + ": expected a list of layer indices");
      for (const json& layer : *mlp_only) {
        if (!layer.is_number_integer() || layer.get<std::int64_t>() != dense) {
          Fail("mlp_only_layers = " + HfShow(*mlp_only) +
               ": the engine's dense layers are the first ones, [0, 1, ..., k-1]");
        }
        ++dense;
      }
    }
    Add("n_dense_layers", dense, "mlp_only_layers", root_.contains("mlp_only_layers") ? "" : "absent ([])");
    const std::string qwen = "\"qwen3_moe\"";
    Add("n_shared_experts", 0, "model_type", qwen + " (no shared experts)");
    Add("score_func", std::string("softmax"), "model_type", qwen + " (softmax scores)");
    Add("route_scale", 1.0, "model_type", qwen + " (weights unscaled)");
    Add("n_expert_groups", 1, "model_type", qwen + " (no expert groups)");
    Add("n_limited_groups", 1, "model_type", qwen + " (no expert groups)");
  }

  const json& root_;
  std::string source_;
  std::vector<HuggingFaceKey> keys_;
  int dim_ = 0;
};

// ForEachField's order, so messages and tests see the job file's order.
std::vector<HuggingFaceKey> InSchemaOrder(std::vector<HuggingFaceKey> keys) {
  std::vector<HuggingFaceKey> out;
  JobSpec dummy;
  ForEachField(dummy, [&](const char* section, const char* key, auto&) {
    if (std::string(section) != "model") return;
    for (HuggingFaceKey& k : keys) {
      if (k.key == key) out.push_back(std::move(k));
    }
  });
  return out;
}

SpecError HfFileError(SpecError::Kind kind, const std::string& path, const std::string& what) {
  SpecError e = Invalid("", "file", what);
  e.kind = kind;
  e.origin = path;
  return e;
}

// "hidden_size = 256 in /m/config.json", plus the value it means when that reads
// differently ("model_type = \"qwen3_moe\" (softmax scores)").
std::string HfSide(const HuggingFaceKey& k, const std::string& path) {
  return k.hf_field + " = " + k.hf_text + " in " + path;
}

std::string ModelPath(const std::string& key) { return "model." + key; }

}  // namespace

Result<std::vector<HuggingFaceKey>> ParseHuggingFaceConfig(std::string_view text, const std::string& source_name) {
  if (text.size() > kMaxHuggingFaceConfigBytes) {
    return HfFileError(SpecError::Kind::kInvalid, source_name,
                       "config.json is " + std::to_string(text.size()) + " bytes, over the limit of " +
                           std::to_string(kMaxHuggingFaceConfigBytes) + " bytes (1 MiB)");
  }
  if (text.find_first_not_of(" \t\r\n") == std::string_view::npos) {
    return HfFileError(SpecError::Kind::kInvalid, source_name, "config.json is empty");
  }
  if (!IsUtf8(text)) return HfFileError(SpecError::Kind::kInvalid, source_name, "config.json is not valid UTF-8");
  json root;
  try {
    root = json::parse(text.begin(), text.end());
  } catch (const json::exception& e) {
    return HfFileError(SpecError::Kind::kInvalid, source_name, "config.json is not valid JSON: " + Quote(e.what()));
  }
  if (!root.is_object()) {
    return HfFileError(SpecError::Kind::kInvalid, source_name,
                       "config.json is " + HfShow(root) + ", not a JSON object");
  }
  try {
    return InSchemaOrder(HfConfigReader(root, source_name).Read());
  } catch (const HfConfigFailure& f) {
    return f.error;
  } catch (const json::exception& e) {
    return HfFileError(SpecError::Kind::kInvalid, source_name, "config.json: " + Quote(e.what()));
  }
}

Result<std::vector<HuggingFaceKey>> ReadHuggingFaceConfig(const std::string& config_json_path) {
  absl::StatusOr<std::string> text = ReadFile(config_json_path, kMaxHuggingFaceConfigBytes);
  if (!text.ok()) {
    if (absl::IsOutOfRange(text.status())) {
      return HfFileError(
          SpecError::Kind::kInvalid, config_json_path,
          "config.json is larger than the limit of " + std::to_string(kMaxHuggingFaceConfigBytes) + " bytes (1 MiB)");
    }
    return HfFileError(absl::IsNotFound(text.status()) ? SpecError::Kind::kNotFound : SpecError::Kind::kInvalid,
                       config_json_path, "cannot read config.json (" + std::string(text.status().message()) + ")");
  }
  return ParseHuggingFaceConfig(*text, config_json_path);
}

bool IsHuggingFaceFolder(const std::string& path) {
  if (path.empty() || !IsHfDirectory(path)) return false;
  const std::string base = path + (absl::EndsWith(path, "/") ? "" : "/");
  return IsHfRegularFile(base + "config.json") && !IsHfRegularFile(base + "manifest.json");
}

std::optional<SpecError> ApplyHuggingFaceConfig(const std::string& folder, SpecInput& input) {
  const std::string path = HfConfigPath(folder);
  Result<std::vector<HuggingFaceKey>> keys = ReadHuggingFaceConfig(path);
  if (!keys.ok()) return keys.error();
  // The named preset's values, for the keys the job leaves to it.
  std::optional<JobSpec> preset;
  std::string preset_name;
  if (const Assignment* a = input.Find("model", "preset")) {
    SpecInput only;
    only.SetTyped("model", "preset", a->value, a->origin);
    Result<JobSpec> resolved = Resolve(only);
    if (!resolved.ok()) return resolved.error();
    preset = resolved.value();
    preset_name = std::get<std::string>(a->value);
  }
  for (const HuggingFaceKey& k : keys.value()) {
    if (const Assignment* given = input.Find("model", k.key)) {
      if (given->value == k.value) continue;
      return Invalid(ModelPath(k.key), "hf_config",
                     ModelPath(k.key) + " = " + ToText(given->value) +
                         (given->origin.empty() ? "" : " (" + given->origin + ")") + " contradicts " + HfSide(k, path));
    }
    if (preset.has_value()) {
      const FieldValue preset_value = GetField(*preset, "model", k.key);
      if (preset_value != k.value) {
        return Invalid(ModelPath(k.key), "hf_config",
                       "model.preset \"" + Quote(preset_name) + "\" sets " + ModelPath(k.key) + " = " +
                           ToText(preset_value) + ", which contradicts " + HfSide(k, path) +
                           " (drop model.preset or choose the preset of this model)");
      }
    }
    if (auto e = input.SetTyped("model", k.key, k.value, path + " (" + k.hf_field + ")")) return e;
  }
  // Qwen3's router has no bias: without one given, the aux-free bias stays off (the
  // default preset's would train one, which the model's Hugging Face export refuses).
  const bool qwen = std::any_of(keys.value().begin(), keys.value().end(), [](const HuggingFaceKey& k) {
    return k.key == "architecture" && k.value == FieldValue{std::string("qwen3_moe")};
  });
  if (qwen && !preset.has_value() && input.Find("model", "load_balance_coeff") == nullptr) {
    if (auto e = input.SetTyped("model", "load_balance_coeff", FieldValue{0.0},
                                path + " (Qwen3MoeForCausalLM has no router bias)")) {
      return e;
    }
  }
  return std::nullopt;
}

std::optional<SpecError> ApplyHuggingFaceFolder(SpecInput& input) {
  const Assignment* load = input.Find("checkpoint", "initial_load_path");
  if (load == nullptr) return std::nullopt;
  const std::string folder = std::get<std::string>(load->value);
  if (!IsHuggingFaceFolder(folder)) return std::nullopt;
  return ApplyHuggingFaceConfig(folder, input);
}

std::optional<SpecError> CheckAgainstHuggingFaceConfig(const std::string& folder, const ModelSpec& model) {
  const std::string path = HfConfigPath(folder);
  Result<std::vector<HuggingFaceKey>> keys = ReadHuggingFaceConfig(path);
  if (!keys.ok()) return keys.error();
  JobSpec spec;
  spec.model = model;
  for (const HuggingFaceKey& k : keys.value()) {
    // head_dim 0 means dim / n_heads: compare the width in use.
    const FieldValue ours = k.key == "head_dim" ? FieldValue{model.head_dim()} : GetField(spec, "model", k.key);
    if (ours == k.value) continue;
    return Invalid(ModelPath(k.key), "hf_config",
                   "the job's " + ModelPath(k.key) + " = " + ToText(ours) + " contradicts " + HfSide(k, path));
  }
  return std::nullopt;
}

Result<std::string> HuggingFaceConfigJson(const JobSpec& spec) {
  const ModelSpec& m = spec.model;
  const bool deepseek = m.architecture == "deepseek_v3";
  if (!deepseek && m.architecture != "qwen3_moe") {
    return Unimplemented("model.architecture", "model.architecture=\"" + Quote(m.architecture) +
                                                   "\" has no Hugging Face transformers class: a config.json is "
                                                   "written for deepseek_v3 and qwen3_moe only");
  }
  const bool yarn = m.rope_factor > 1;
  if (!deepseek) {
    const char* problem = nullptr;
    if (m.n_shared_experts != 0) problem = "model.n_shared_experts must be 0";
    if (m.n_expert_groups != 1 || m.n_limited_groups != 1)
      problem = "model.n_expert_groups and n_limited_groups must be 1";
    if (m.route_scale != 1.0) problem = "model.route_scale must be 1";
    if (m.score_func != "softmax") problem = "model.score_func must be \"softmax\"";
    if (yarn) problem = "model.rope_factor must be 1 (no YaRN)";
    if (problem != nullptr) {
      return Unimplemented("model.architecture",
                           std::string(problem) + ": transformers' Qwen3MoeForCausalLM cannot express it");
    }
  }
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  j["architectures"] = {deepseek ? "DeepseekV3ForCausalLM" : "Qwen3MoeForCausalLM"};
  j["model_type"] = m.architecture;
  // The engine's weights are float32 (bf16 is a compute dtype over float32 masters).
  j["dtype"] = "float32";
  j["vocab_size"] = m.vocab_size;
  j["hidden_size"] = m.dim;
  j["intermediate_size"] = m.ffn_hidden;
  j["moe_intermediate_size"] = m.expert_hidden;
  j["num_hidden_layers"] = m.n_layers;
  j["num_attention_heads"] = m.n_heads;
  j["num_key_value_heads"] = deepseek ? m.n_heads : m.n_kv_heads;
  j["num_experts_per_tok"] = m.top_k;
  j["norm_topk_prob"] = m.route_norm;
  j["rms_norm_eps"] = m.norm_eps;
  j["hidden_act"] = "silu";
  j["tie_word_embeddings"] = false;
  j["attention_bias"] = false;
  j["attention_dropout"] = 0.0;
  // YaRN's context (transformers checks it against factor · original length).
  int max_positions = spec.training.seq_len;
  if (yarn) max_positions = std::max(max_positions, static_cast<int>(m.original_seq_len * m.rope_factor));
  j["max_position_embeddings"] = max_positions;
  if (deepseek) {
    j["first_k_dense_replace"] = m.n_dense_layers;
    j["n_routed_experts"] = m.n_routed_experts;
    j["n_shared_experts"] = m.n_shared_experts;
    // DeepSeek's own config.json field; transformers' DeepseekV3 model always scores
    // by sigmoid (docs/checkpoints.md).
    j["scoring_func"] = m.score_func;
    j["routed_scaling_factor"] = m.route_scale;
    j["n_group"] = m.n_expert_groups;
    j["topk_group"] = m.n_limited_groups;
    j["q_lora_rank"] = m.q_lora_rank > 0 ? nlohmann::ordered_json(m.q_lora_rank) : nlohmann::ordered_json(nullptr);
    j["kv_lora_rank"] = m.kv_lora_rank;
    j["qk_nope_head_dim"] = m.qk_nope_head_dim;
    j["qk_rope_head_dim"] = m.qk_rope_head_dim;
    j["v_head_dim"] = m.v_head_dim;
    j["rope_interleave"] = true;
  } else {
    j["num_local_experts"] = m.n_routed_experts;
    j["head_dim"] = m.head_dim();
    nlohmann::ordered_json dense = nlohmann::ordered_json::array();
    for (int i = 0; i < m.n_dense_layers; ++i) dense.push_back(i);
    j["mlp_only_layers"] = dense;
    j["decoder_sparse_step"] = 1;
    j["use_sliding_window"] = false;
    j["sliding_window"] = nullptr;
  }
  nlohmann::ordered_json rope = nlohmann::ordered_json::object();
  rope["rope_theta"] = m.rope_theta;
  rope["rope_type"] = yarn ? "yarn" : "default";
  if (yarn) {
    rope["factor"] = m.rope_factor;
    rope["original_max_position_embeddings"] = m.original_seq_len;
    rope["beta_fast"] = m.beta_fast;
    rope["beta_slow"] = m.beta_slow;
    rope["mscale"] = m.mscale;
    rope["mscale_all_dim"] = m.mscale;
  }
  j["rope_parameters"] = rope;
  return j.dump(2) + "\n";
}

}  // namespace trainyard::spec
