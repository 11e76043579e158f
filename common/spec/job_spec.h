// The job schema as plain values: one struct per job-file section, one member per key,
// named exactly as the TOML keys and the trainyard.v1.JobSpec proto fields. This is
// the resolved form (every key has a value): presets and defaults are applied by
// spec::Resolve (presets.h) and the rules are checked by spec::Validate (rules.h).
//
// No torch, protobuf, gRPC or absl here: the controller and the CLI (through the proto
// mapping in common/spec_proto) and the engine (which must build on a GPU box that has
// only LibTorch) all use this header.
#pragma once

#include <cstdint>
#include <string>

namespace trainyard::spec {

struct JobMeta {
  std::string name = "job";
  int priority = 0;
  int time_limit_s = 0;     // 0: none
  bool preemptible = true;  // false: never preempted (priority > 0 then needs admin)
  // Jobs to wait for: "job-3,job-4:failed" (common/spec/dependencies.h); "" = none.
  std::string after;
};

struct ModelSpec {
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
  // > 0: each expert keeps at most ceil(seq·top_k/n_routed_experts · factor) of a
  // sequence's assignments, the highest-gated; 0 = dropless (the default).
  double capacity_factor = 0;
  // "trainyard" | "deepseek_v3" (multi-head latent attention) | "qwen3_moe" (GQA with
  // per-head q/k RMSNorm): docs/architecture.md, "Architectures".
  std::string architecture = "trainyard";
  // deepseek_v3's multi-head latent attention (0 where the architecture has none).
  int q_lora_rank = 0;  // 0: a plain query projection
  int kv_lora_rank = 0;
  int qk_nope_head_dim = 0;
  int qk_rope_head_dim = 0;
  int v_head_dim = 0;
  // YaRN RoPE scaling, on when rope_factor > 1.
  double rope_factor = 1.0;
  int original_seq_len = 4096;
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  double mscale = 1.0;
  // Group-limited routing (1 and 1: plain top-k over every expert).
  int n_expert_groups = 1;
  int n_limited_groups = 1;
  // Grouped-query attention's head width; 0 = dim / n_heads.
  int head_dim_override = 0;

  bool mla() const { return architecture == "deepseek_v3"; }
  // Qwen3's RMSNorm of each query and key head before RoPE.
  bool qk_norm() const { return architecture == "qwen3_moe"; }
  // The per-head width RoPE rotates, and that of a query/key head.
  int rope_head_dim() const { return mla() ? qk_rope_head_dim : head_dim(); }
  int qk_head_dim() const { return mla() ? qk_nope_head_dim + qk_rope_head_dim : head_dim(); }
  int value_head_dim() const { return mla() ? v_head_dim : head_dim(); }
  int head_dim() const { return head_dim_override > 0 ? head_dim_override : (n_heads > 0 ? dim / n_heads : 0); }
  int n_moe_layers() const { return n_layers - n_dense_layers; }
};

struct TrainingSpec {
  int steps = 100;
  int batch_size = 0;  // per DP rank
  int seq_len = 0;
  double lr = 8e-4;
  int warmup_steps = 10;
  double max_norm = 1.0;
  std::uint64_t seed = 42;
  std::string dataset = "synthetic";  // "synthetic" | "text" | "tokens"
  std::string dataset_path;
  int log_freq = 1;
  int grad_accum_steps = 1;  // micro-batches per optimizer step
  // No step progress outside a collective for this long: Stall; 0 = off. Not given:
  // 0 on CPU, kDefaultCudaStepTimeoutS for resources.device="cuda" (presets.h).
  double step_timeout_s = 0;
  bool shuffle = false;                  // seeded permutation of the samples per epoch
  std::string mixed_precision = "fp32";  // "fp32" | "bf16" (runs only where the engine has bf16)
};

struct ParallelismSpec {
  int dp = 1;  // data-parallel degree: dp_replicate · dp_shard (torchtitan's two degrees)
  int tp = 1;
  int ep = 1;  // carved from dp·tp: EP adds no ranks
  // FSDP degree (torchtitan's data_parallel_shard_degree): the DP ranks of one replica,
  // over which parameters, gradients and AdamW state are sharded; divides dp. 1: every
  // DP rank holds a full replica (the meaning of every job file without the key).
  int dp_shard = 1;
  // HSDP's replica degree (data_parallel_replicate_degree): 0 derives it as
  // dp / dp_shard; any other value must equal that.
  int dp_replicate = 0;
  // Pipeline parallelism (docs/parallelism.md, "Pipeline parallelism"): the keys and
  // their rules only; a job with pp > 1 is refused until the runtime exists.
  int pp = 1;                        // pipeline degree: the model's layers split over pp ranks
  std::string pp_schedule = "1f1b";  // "1f1b" | "interleaved_1f1b"
  int pp_microbatches = 0;           // a DP rank's batch_size splits into; 0: batch_size (1 sequence each)
  int pp_virtual_stages = 0;         // stages a pp rank holds; 0: 1 (1f1b), 2 (interleaved)
  int pp_layers_per_stage = 0;       // layers of every virtual stage; 0: a balanced split
  double collective_timeout_s = 300.0;

  int world_size() const { return pp * dp * tp; }
  // pp_virtual_stages with 0 resolved by the schedule, and the stages of the whole pipeline.
  int virtual_stages() const {
    if (pp_virtual_stages > 0) return pp_virtual_stages;
    return pp_schedule == "interleaved_1f1b" ? 2 : 1;
  }
  int pipeline_stages() const { return pp * virtual_stages(); }
};

struct CompileSpec {
  std::string backend = "eager";         // "eager" | "jit" | "cudagraph"
  std::string regions = "per_layer";     // "per_layer" | "model"
  int recompile_limit = 8;               // entries per region key before the eager fallback
  std::string on_side_effect = "error";  // "error" | "fallback"
  bool preflight = false;                // the controller runs a compile preflight first
  int summary_every = 100;               // steps between per-region SUMMARY events
  // TEST ONLY: the first MoE layer writes its routing counts into a module buffer
  // during forward, reproducing the upstream "unsafe side effect" bug.
  bool test_plant_side_effect = false;
};

struct ActivationCheckpointSpec {
  std::string mode = "none";  // "none" | "full" | "selective"
};

struct ProfilingSpec {
  bool enable = false;
  int freq = 100;
  int warmup = 3;
  int active = 2;
};

struct CheckpointSpec {
  int interval = 0;  // steps; 0 = off
  int keep = 3;
  int keep_best = 0;                     // 0 = off
  std::string best_metric = "val_loss";  // "val_loss" | "train_loss"; lower is better
  std::string initial_load_path;
  std::string dir;  // where checkpoints go; required when interval > 0
};

struct ResourcesSpec {
  std::string device = "cpu";  // "cpu" | "cuda"
  int ranks_per_worker = 0;    // 0 = as many as fit
};

struct RestartSpec {
  int max_restarts = 0;
  double backoff_s = 1.0;  // before the first restart; doubles after each
  int min_dp = 0;          // 0: no elastic shrink
  double elastic_wait_s = 30.0;
};

struct ValidationSpec {
  std::string dataset;  // "" = off | "synthetic" | "text" | "tokens"
  std::string dataset_path;
  int freq = 100;  // steps between evaluations
  int steps = 10;  // batches per evaluation (each batch_size per DP rank)
};

struct JobSpec {
  JobMeta job;
  ModelSpec model;
  TrainingSpec training;
  ParallelismSpec parallelism;
  CompileSpec compile;
  ActivationCheckpointSpec activation_checkpoint;
  ProfilingSpec profiling;
  CheckpointSpec checkpoint;
  ResourcesSpec resources;
  RestartSpec restart;
  ValidationSpec validation;
};

// The one list of keys: calls visit(section, key, member) for every field of `spec`,
// in the order of the job file and the proto. Works on const and non-const specs.
// Every reader, writer and mapping is written against this list, so a key added here
// (and to spec.proto, which a test checks) is known everywhere.
template <class Spec, class Visit>
void ForEachField(Spec& s, Visit&& visit) {
  visit("job", "name", s.job.name);
  visit("job", "priority", s.job.priority);
  visit("job", "time_limit_s", s.job.time_limit_s);
  visit("job", "preemptible", s.job.preemptible);
  visit("job", "after", s.job.after);

  visit("model", "preset", s.model.preset);
  visit("model", "vocab_size", s.model.vocab_size);
  visit("model", "dim", s.model.dim);
  visit("model", "n_layers", s.model.n_layers);
  visit("model", "n_dense_layers", s.model.n_dense_layers);
  visit("model", "n_heads", s.model.n_heads);
  visit("model", "n_kv_heads", s.model.n_kv_heads);
  visit("model", "ffn_hidden", s.model.ffn_hidden);
  visit("model", "n_routed_experts", s.model.n_routed_experts);
  visit("model", "top_k", s.model.top_k);
  visit("model", "n_shared_experts", s.model.n_shared_experts);
  visit("model", "expert_hidden", s.model.expert_hidden);
  visit("model", "score_func", s.model.score_func);
  visit("model", "route_norm", s.model.route_norm);
  visit("model", "route_scale", s.model.route_scale);
  visit("model", "rope_theta", s.model.rope_theta);
  visit("model", "norm_eps", s.model.norm_eps);
  visit("model", "load_balance_coeff", s.model.load_balance_coeff);
  visit("model", "capacity_factor", s.model.capacity_factor);
  visit("model", "architecture", s.model.architecture);
  visit("model", "q_lora_rank", s.model.q_lora_rank);
  visit("model", "kv_lora_rank", s.model.kv_lora_rank);
  visit("model", "qk_nope_head_dim", s.model.qk_nope_head_dim);
  visit("model", "qk_rope_head_dim", s.model.qk_rope_head_dim);
  visit("model", "v_head_dim", s.model.v_head_dim);
  visit("model", "rope_factor", s.model.rope_factor);
  visit("model", "original_seq_len", s.model.original_seq_len);
  visit("model", "beta_fast", s.model.beta_fast);
  visit("model", "beta_slow", s.model.beta_slow);
  visit("model", "mscale", s.model.mscale);
  visit("model", "n_expert_groups", s.model.n_expert_groups);
  visit("model", "n_limited_groups", s.model.n_limited_groups);
  visit("model", "head_dim", s.model.head_dim_override);

  visit("training", "steps", s.training.steps);
  visit("training", "batch_size", s.training.batch_size);
  visit("training", "seq_len", s.training.seq_len);
  visit("training", "lr", s.training.lr);
  visit("training", "warmup_steps", s.training.warmup_steps);
  visit("training", "max_norm", s.training.max_norm);
  visit("training", "seed", s.training.seed);
  visit("training", "dataset", s.training.dataset);
  visit("training", "dataset_path", s.training.dataset_path);
  visit("training", "log_freq", s.training.log_freq);
  visit("training", "grad_accum_steps", s.training.grad_accum_steps);
  visit("training", "step_timeout_s", s.training.step_timeout_s);
  visit("training", "shuffle", s.training.shuffle);
  visit("training", "mixed_precision", s.training.mixed_precision);

  visit("parallelism", "dp", s.parallelism.dp);
  visit("parallelism", "tp", s.parallelism.tp);
  visit("parallelism", "ep", s.parallelism.ep);
  visit("parallelism", "dp_shard", s.parallelism.dp_shard);
  visit("parallelism", "dp_replicate", s.parallelism.dp_replicate);
  visit("parallelism", "pp", s.parallelism.pp);
  visit("parallelism", "pp_schedule", s.parallelism.pp_schedule);
  visit("parallelism", "pp_microbatches", s.parallelism.pp_microbatches);
  visit("parallelism", "pp_virtual_stages", s.parallelism.pp_virtual_stages);
  visit("parallelism", "pp_layers_per_stage", s.parallelism.pp_layers_per_stage);
  visit("parallelism", "collective_timeout_s", s.parallelism.collective_timeout_s);

  visit("compile", "backend", s.compile.backend);
  visit("compile", "regions", s.compile.regions);
  visit("compile", "recompile_limit", s.compile.recompile_limit);
  visit("compile", "on_side_effect", s.compile.on_side_effect);
  visit("compile", "preflight", s.compile.preflight);
  visit("compile", "summary_every", s.compile.summary_every);
  visit("compile", "test_plant_side_effect", s.compile.test_plant_side_effect);

  visit("activation_checkpoint", "mode", s.activation_checkpoint.mode);

  visit("profiling", "enable", s.profiling.enable);
  visit("profiling", "freq", s.profiling.freq);
  visit("profiling", "warmup", s.profiling.warmup);
  visit("profiling", "active", s.profiling.active);

  visit("checkpoint", "interval", s.checkpoint.interval);
  visit("checkpoint", "keep", s.checkpoint.keep);
  visit("checkpoint", "keep_best", s.checkpoint.keep_best);
  visit("checkpoint", "best_metric", s.checkpoint.best_metric);
  visit("checkpoint", "initial_load_path", s.checkpoint.initial_load_path);
  visit("checkpoint", "dir", s.checkpoint.dir);

  visit("resources", "device", s.resources.device);
  visit("resources", "ranks_per_worker", s.resources.ranks_per_worker);

  visit("restart", "max_restarts", s.restart.max_restarts);
  visit("restart", "backoff_s", s.restart.backoff_s);
  visit("restart", "min_dp", s.restart.min_dp);
  visit("restart", "elastic_wait_s", s.restart.elastic_wait_s);

  visit("validation", "dataset", s.validation.dataset);
  visit("validation", "dataset_path", s.validation.dataset_path);
  visit("validation", "freq", s.validation.freq);
  visit("validation", "steps", s.validation.steps);
}

}  // namespace trainyard::spec
