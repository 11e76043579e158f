#include "worker/engine/engine_config.h"

#include <fstream>
#include <initializer_list>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

namespace trainyard::engine {
namespace {

using nlohmann::json;

[[noreturn]] void Fail(const std::string& message) {
  throw std::invalid_argument("config: " + message);
}

const json& Field(const json& root, const char* section, const char* key) {
  auto s = root.find(section);
  if (s == root.end() || !s->is_object()) Fail(std::string("missing ") + section);
  auto k = s->find(key);
  if (k == s->end() || k->is_null()) Fail(std::string("missing ") + section + "." + key);
  return *k;
}

std::string Path(const char* section, const char* key) {
  return std::string(section) + "." + key;
}

// proto3 JSON writes 64-bit integers as strings and accepts numbers; 32-bit ones are
// numbers but parsers also accept strings. Take both everywhere.
std::int64_t GetInt(const json& root, const char* section, const char* key) {
  const json& v = Field(root, section, key);
  if (v.is_number_integer()) return v.get<std::int64_t>();
  if (v.is_number_float()) {
    double d = v.get<double>();
    if (d == static_cast<double>(static_cast<std::int64_t>(d))) return static_cast<std::int64_t>(d);
  }
  if (v.is_string()) {
    const std::string s = v.get<std::string>();
    try {
      std::size_t used = 0;
      long long parsed = std::stoll(s, &used);
      if (used == s.size()) return parsed;
    } catch (const std::exception&) {
    }
  }
  Fail(Path(section, key) + ": expected an integer, got " + v.dump());
}

std::uint64_t GetUint64(const json& root, const char* section, const char* key) {
  const json& v = Field(root, section, key);
  if (v.is_number_unsigned()) return v.get<std::uint64_t>();
  if (v.is_number_integer() && v.get<std::int64_t>() >= 0) return v.get<std::uint64_t>();
  if (v.is_string()) {
    const std::string s = v.get<std::string>();
    try {
      std::size_t used = 0;
      unsigned long long parsed = std::stoull(s, &used);
      if (used == s.size() && !s.empty() && s[0] != '-') return parsed;
    } catch (const std::exception&) {
    }
  }
  Fail(Path(section, key) + ": expected an unsigned 64-bit integer, got " + v.dump());
}

double GetDouble(const json& root, const char* section, const char* key) {
  const json& v = Field(root, section, key);
  if (v.is_number()) return v.get<double>();
  if (v.is_string()) {  // proto3 JSON also allows "NaN", "1e-5" etc. as strings
    try {
      return std::stod(v.get<std::string>());
    } catch (const std::exception&) {
    }
  }
  Fail(Path(section, key) + ": expected a number, got " + v.dump());
}

std::string GetString(const json& root, const char* section, const char* key) {
  const json& v = Field(root, section, key);
  if (!v.is_string()) Fail(Path(section, key) + ": expected a string, got " + v.dump());
  return v.get<std::string>();
}

bool GetBool(const json& root, const char* section, const char* key) {
  const json& v = Field(root, section, key);
  if (!v.is_boolean()) Fail(Path(section, key) + ": expected true or false, got " + v.dump());
  return v.get<bool>();
}

int GetInt32(const json& root, const char* section, const char* key) {
  std::int64_t v = GetInt(root, section, key);
  if (v < INT32_MIN || v > INT32_MAX) Fail(Path(section, key) + ": out of int32 range");
  return static_cast<int>(v);
}

// Optional keys (sections added after the first release): the default when absent.
const json* Optional(const json& root, const char* section, const char* key) {
  auto s = root.find(section);
  if (s == root.end() || !s->is_object()) return nullptr;
  auto k = s->find(key);
  return k == s->end() || k->is_null() ? nullptr : &*k;
}

std::string OptString(const json& root, const char* section, const char* key, std::string fallback) {
  return Optional(root, section, key) ? GetString(root, section, key) : fallback;
}

int OptInt32(const json& root, const char* section, const char* key, int fallback) {
  return Optional(root, section, key) ? GetInt32(root, section, key) : fallback;
}

bool OptBool(const json& root, const char* section, const char* key, bool fallback) {
  return Optional(root, section, key) ? GetBool(root, section, key) : fallback;
}

void RequireOneOf(const std::string& path, const std::string& value, std::initializer_list<const char*> allowed) {
  std::string list;
  for (const char* a : allowed) {
    if (value == a) return;
    list += (list.empty() ? "\"" : ", \"") + std::string(a) + "\"";
  }
  Fail(path + "=\"" + value + "\" must be one of " + list);
}

void RequireRange(const std::string& path, double value, double lo, double hi) {
  if (!(value >= lo && value <= hi)) {
    std::ostringstream os;
    os << path << "=" << value << " must be in [" << lo << ", " << hi << "]";
    Fail(os.str());
  }
}

void Validate(const EngineConfig& c) {
  const ModelConfig& m = c.model;
  RequireRange("model.vocab_size", m.vocab_size, 2, 1 << 24);
  RequireRange("model.dim", m.dim, 2, 1 << 16);
  RequireRange("model.n_layers", m.n_layers, 1, 1024);
  RequireRange("model.n_dense_layers", m.n_dense_layers, 0, m.n_layers);
  RequireRange("model.n_heads", m.n_heads, 1, m.dim);
  if (m.dim % m.n_heads != 0) Fail("model.dim=" + std::to_string(m.dim) + " must be divisible by model.n_heads=" + std::to_string(m.n_heads));
  if (m.head_dim() % 2 != 0) Fail("model.dim/model.n_heads=" + std::to_string(m.head_dim()) + " must be even for RoPE");
  RequireRange("model.n_kv_heads", m.n_kv_heads, 1, m.n_heads);
  if (m.n_heads % m.n_kv_heads != 0) Fail("model.n_heads=" + std::to_string(m.n_heads) + " must be divisible by model.n_kv_heads=" + std::to_string(m.n_kv_heads));
  if (m.n_dense_layers > 0) RequireRange("model.ffn_hidden", m.ffn_hidden, 1, 1 << 20);
  if (m.n_moe_layers() > 0) {
    RequireRange("model.n_routed_experts", m.n_routed_experts, 1, 4096);
    RequireRange("model.top_k", m.top_k, 1, m.n_routed_experts);
    RequireRange("model.n_shared_experts", m.n_shared_experts, 0, 64);
    RequireRange("model.expert_hidden", m.expert_hidden, 1, 1 << 20);
    if (m.score_func != "sigmoid" && m.score_func != "softmax") Fail("model.score_func=\"" + m.score_func + "\" must be \"sigmoid\" or \"softmax\"");
  }
  RequireRange("model.norm_eps", m.norm_eps, 0, 1);
  RequireRange("model.rope_theta", m.rope_theta, 1, 1e12);

  const TrainingConfig& t = c.training;
  RequireRange("training.steps", t.steps, 1, 1e9);
  RequireRange("training.batch_size", t.batch_size, 1, 1 << 20);
  RequireRange("training.seq_len", t.seq_len, 1, 1 << 24);
  RequireRange("training.lr", t.lr, 0, 10);
  RequireRange("training.warmup_steps", t.warmup_steps, 0, 1e9);
  RequireRange("training.max_norm", t.max_norm, 0, 1e12);
  RequireRange("training.log_freq", t.log_freq, 1, 1e9);
  if (t.dataset != "synthetic" && t.dataset != "tokens" && t.dataset != "text") {
    Fail("training.dataset=\"" + t.dataset + "\" must be \"synthetic\", \"tokens\" or \"text\"");
  }
  if (t.dataset != "synthetic" && t.dataset_path.empty()) Fail("training.dataset_path is required for dataset \"" + t.dataset + "\"");

  const ParallelismConfig& p = c.parallelism;
  RequireRange("parallelism.dp", p.dp, 1, 1 << 16);
  RequireRange("parallelism.tp", p.tp, 1, 1 << 16);
  RequireRange("parallelism.ep", p.ep, 1, 1 << 16);
  const std::string tp = "parallelism.tp=" + std::to_string(p.tp);
  if (m.n_heads % p.tp != 0 || m.n_kv_heads % p.tp != 0) {
    Fail(tp + " must divide model.n_heads=" + std::to_string(m.n_heads) + " and model.n_kv_heads=" + std::to_string(m.n_kv_heads));
  }
  if (m.n_dense_layers > 0 && m.ffn_hidden % p.tp != 0) Fail(tp + " must divide model.ffn_hidden=" + std::to_string(m.ffn_hidden));
  if (m.n_moe_layers() > 0 && (int64_t{m.expert_hidden} * m.n_shared_experts) % p.tp != 0) {
    Fail(tp + " must divide the shared-expert hidden size model.expert_hidden*n_shared_experts=" +
         std::to_string(int64_t{m.expert_hidden} * m.n_shared_experts));
  }
  const std::string ep = "parallelism.ep=" + std::to_string(p.ep);
  if (m.n_moe_layers() > 0 && m.n_routed_experts % p.ep != 0) Fail(ep + " must divide model.n_routed_experts=" + std::to_string(m.n_routed_experts));
  if ((int64_t{p.dp} * p.tp) % p.ep != 0) Fail(ep + " must divide dp*tp=" + std::to_string(int64_t{p.dp} * p.tp));
  RequireRange("parallelism.collective_timeout_s", p.collective_timeout_s, 0.001, 1e7);

  const CompileConfig& cc = c.compile;
  RequireOneOf("compile.backend", cc.backend, {"eager", "jit", "cudagraph"});
  RequireOneOf("compile.regions", cc.regions, {"per_layer", "model"});
  RequireRange("compile.recompile_limit", cc.recompile_limit, 1, 1 << 16);
  RequireOneOf("compile.on_side_effect", cc.on_side_effect, {"error", "fallback"});
  RequireRange("compile.summary_every", cc.summary_every, 1, 1e9);
  RequireOneOf("activation_checkpoint.mode", c.activation_checkpoint.mode, {"none", "full", "selective"});
  RequireOneOf("resources.device", c.resources.device, {"cpu", "cuda"});
  if (cc.regions == "model" && p.tp != 1) {
    Fail("compile.regions=\"model\" needs parallelism.tp=1: the TP all-reduces split every block, so use "
         "compile.regions=\"per_layer\" with tp=" + std::to_string(p.tp));
  }
  if (cc.regions == "model" && c.activation_checkpoint.mode == "selective") {
    Fail("activation_checkpoint.mode=\"selective\" needs compile.regions=\"per_layer\": under \"model\" the "
         "attention is not a region of its own (use mode \"full\")");
  }
}

}  // namespace

EngineConfig ParseEngineConfig(const std::string& json_text) {
  json root;
  try {
    root = json::parse(json_text);
  } catch (const json::parse_error& e) {
    Fail(std::string("not valid JSON: ") + e.what());
  }
  if (!root.is_object()) Fail("top level must be a JSON object");

  EngineConfig c;
  ModelConfig& m = c.model;
  m.preset = root.contains("model") && root["model"].contains("preset") && root["model"]["preset"].is_string()
                 ? root["model"]["preset"].get<std::string>()
                 : "";
  m.vocab_size = GetInt32(root, "model", "vocab_size");
  m.dim = GetInt32(root, "model", "dim");
  m.n_layers = GetInt32(root, "model", "n_layers");
  m.n_dense_layers = GetInt32(root, "model", "n_dense_layers");
  m.n_heads = GetInt32(root, "model", "n_heads");
  m.n_kv_heads = GetInt32(root, "model", "n_kv_heads");
  m.ffn_hidden = GetInt32(root, "model", "ffn_hidden");
  m.n_routed_experts = GetInt32(root, "model", "n_routed_experts");
  m.top_k = GetInt32(root, "model", "top_k");
  m.n_shared_experts = GetInt32(root, "model", "n_shared_experts");
  m.expert_hidden = GetInt32(root, "model", "expert_hidden");
  m.score_func = GetString(root, "model", "score_func");
  m.route_norm = GetBool(root, "model", "route_norm");
  m.route_scale = GetDouble(root, "model", "route_scale");
  m.rope_theta = GetDouble(root, "model", "rope_theta");
  m.norm_eps = GetDouble(root, "model", "norm_eps");
  m.load_balance_coeff = GetDouble(root, "model", "load_balance_coeff");

  TrainingConfig& t = c.training;
  t.steps = GetInt32(root, "training", "steps");
  t.batch_size = GetInt32(root, "training", "batch_size");
  t.seq_len = GetInt32(root, "training", "seq_len");
  t.lr = GetDouble(root, "training", "lr");
  t.warmup_steps = GetInt32(root, "training", "warmup_steps");
  t.max_norm = GetDouble(root, "training", "max_norm");
  t.seed = GetUint64(root, "training", "seed");
  t.dataset = GetString(root, "training", "dataset");
  t.dataset_path = GetString(root, "training", "dataset_path");
  t.log_freq = GetInt32(root, "training", "log_freq");

  ParallelismConfig& p = c.parallelism;
  p.dp = GetInt32(root, "parallelism", "dp");
  p.tp = GetInt32(root, "parallelism", "tp");
  p.ep = GetInt32(root, "parallelism", "ep");
  p.collective_timeout_s = GetDouble(root, "parallelism", "collective_timeout_s");

  CompileConfig& cc = c.compile;
  cc.backend = OptString(root, "compile", "backend", cc.backend);
  cc.regions = OptString(root, "compile", "regions", cc.regions);
  cc.recompile_limit = OptInt32(root, "compile", "recompile_limit", cc.recompile_limit);
  cc.on_side_effect = OptString(root, "compile", "on_side_effect", cc.on_side_effect);
  cc.summary_every = OptInt32(root, "compile", "summary_every", cc.summary_every);
  cc.test_plant_side_effect = OptBool(root, "compile", "test_plant_side_effect", cc.test_plant_side_effect);
  c.activation_checkpoint.mode = OptString(root, "activation_checkpoint", "mode", c.activation_checkpoint.mode);
  c.resources.device = OptString(root, "resources", "device", c.resources.device);

  Validate(c);
  return c;
}

EngineConfig LoadEngineConfigFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::invalid_argument("config: cannot open " + path);
  std::ostringstream buf;
  buf << in.rdbuf();
  try {
    return ParseEngineConfig(buf.str());
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(path + ": " + e.what());
  }
}

EngineConfig TinyEngineConfig() {
  EngineConfig c;
  ModelConfig& m = c.model;
  m.preset = "tiny";
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
  TrainingConfig& t = c.training;
  t.steps = 10;
  t.batch_size = 4;
  t.seq_len = 32;
  t.lr = 3e-3;
  t.warmup_steps = 2;
  t.max_norm = 1.0;
  t.seed = 42;
  t.log_freq = 1;
  return c;
}

}  // namespace trainyard::engine
