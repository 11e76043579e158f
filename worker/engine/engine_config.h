// EngineConfig: the part of a normalised trainyard.v1.JobSpec the engine needs, read
// from the proto3 JSON (proto field names preserved) that the worker writes for each
// rank. Plain values only, so tests can build one by hand.
#pragma once

#include <cstdint>
#include <string>

namespace trainyard::engine {

struct ModelConfig {
  std::string preset;
  int vocab_size = 0;
  int dim = 0;
  int n_layers = 0;
  int n_dense_layers = 0;
  int n_heads = 0;
  int n_kv_heads = 0;
  int ffn_hidden = 0;
  int n_routed_experts = 0;
  int top_k = 0;
  int n_shared_experts = 0;
  int expert_hidden = 0;
  std::string score_func = "sigmoid";  // "sigmoid" | "softmax"
  bool route_norm = true;
  double route_scale = 1.0;
  double rope_theta = 10000.0;
  double norm_eps = 1e-5;
  double load_balance_coeff = 1e-3;

  int head_dim() const { return dim / n_heads; }
  int n_moe_layers() const { return n_layers - n_dense_layers; }
};

struct TrainingConfig {
  int steps = 0;
  int batch_size = 0;  // per DP rank
  int seq_len = 0;
  double lr = 0.0;
  int warmup_steps = 0;
  double max_norm = 1.0;
  std::uint64_t seed = 0;
  std::string dataset = "synthetic";  // "synthetic" | "tokens" | "text"
  std::string dataset_path;
  int log_freq = 1;
};

struct ParallelismConfig {
  int dp = 1;
  int tp = 1;
  int ep = 1;
  double collective_timeout_s = 300.0;

  // EP is carved from dp·tp (it does not add ranks).
  int world_size() const { return dp * tp; }
};

// [compile]: how the training step's regions are compiled (worker/engine/compile/).
struct CompileConfig {
  std::string backend = "eager";          // "eager" | "jit" | "cudagraph"
  std::string regions = "per_layer";      // "per_layer" | "model"
  int recompile_limit = 8;                // entries per region key before eager fallback
  std::string on_side_effect = "error";   // "error" | "fallback"
  int summary_every = 100;                // steps between per-region SUMMARY events
  // Test-only: the first MoE layer writes its routing counts into the module buffer
  // layers.{i}.moe.tokens_per_expert during forward (the upstream "unsafe side effect").
  bool test_plant_side_effect = false;
};

// [activation_checkpoint]: "none"; "full" recomputes every transformer block in
// backward; "selective" recomputes only the attention regions.
struct ActivationCheckpointConfig {
  std::string mode = "none";
};

// [resources]: where the ranks train. "cpu" (Gloo groups) or "cuda" (local rank r on GPU
// r % device_count, NCCL groups); see DevicePlacement for whether this process can.
struct ResourcesConfig {
  std::string device = "cpu";  // "cpu" | "cuda"
};

struct EngineConfig {
  ModelConfig model;
  TrainingConfig training;
  ParallelismConfig parallelism;
  CompileConfig compile;  // optional in the JSON: defaults when absent
  ActivationCheckpointConfig activation_checkpoint;
  ResourcesConfig resources;  // optional in the JSON: defaults when absent
};

// Parses and validates. Throws std::invalid_argument with a precise message
// ("config: missing training.steps", "config: model.top_k=9 must be in [1, 8]").
// resources.device is checked against "cpu" | "cuda" only; whether this build and
// machine can run "cuda" is DevicePlacement::RequireUsable's question, asked by every
// program before it starts a rank.
EngineConfig ParseEngineConfig(const std::string& json_text);
EngineConfig LoadEngineConfigFile(const std::string& path);

// The `tiny` preset from DESIGN.md (tests and smoke runs).
EngineConfig TinyEngineConfig();

}  // namespace trainyard::engine
