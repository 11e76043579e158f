// Presets, defaults and normalisation: from the keys a user gave to a complete JobSpec.
#pragma once

#include <string>
#include <vector>

#include "common/spec/job_spec.h"
#include "common/spec/spec_error.h"
#include "common/spec/spec_input.h"

namespace trainyard::spec {

// The preset used when model.preset is not given.
inline constexpr const char* kDefaultPreset = "debug";
// training.warmup_steps when not given: min(10, steps).
inline constexpr int kDefaultWarmupSteps = 10;

// training.step_timeout_s when not given and resources.device is "cuda" (CPU jobs: 0,
// off). On CUDA a collective's wait() does not block the host, so a hang can sit in a
// host-side synchronisation (a step's device synchronize, a .item()) outside any
// collective the watchdog can see; 600 s is far above any step of the configurations
// this engine trains (seconds) and the first step's warm-up, and well under what a
// silent hang costs a GPU fleet (docs/diagnostics.md).
inline constexpr double kDefaultCudaStepTimeoutS = 600;

// Known preset names, in order ("debug", "tiny", "gpu_small", "deepseek_v3_debug",
// "deepseek_v3_16b", "deepseek_v3_671b", "qwen3_moe_debug", "qwen3_30b_a3b",
// "qwen3_235b_a22b").
std::vector<std::string> PresetNames();

// A preset fills every model key plus training.seq_len and training.batch_size:
//   debug: vocab_size 2048, dim 256, n_layers 4, n_dense_layers 1, n_heads 8,
//          n_kv_heads 4, ffn_hidden 768, n_routed_experts 8, top_k 2,
//          n_shared_experts 1, expert_hidden 256, score_func sigmoid, route_norm true,
//          route_scale 1.0, rope_theta 10000, norm_eps 1e-5, load_balance_coeff 1e-3;
//          seq_len 256, batch_size 8 (the reference configuration of benchmarks).
//   tiny:  vocab_size 256, dim 64, n_layers 2, n_dense_layers 1, n_heads 4,
//          n_kv_heads 2, ffn_hidden 128, n_routed_experts 4, top_k 2,
//          n_shared_experts 1, expert_hidden 32, rest as debug; seq_len 32,
//          batch_size 4 (same code paths, fast tests).
//   gpu_small: vocab_size 32768, dim 1024, n_layers 8, n_dense_layers 1, n_heads 16,
//          n_kv_heads 8, ffn_hidden 2816, n_routed_experts 16, top_k 2,
//          n_shared_experts 1, expert_hidden 512, rest as debug; seq_len 2048,
//          batch_size 8 (GPU benchmarks and bench/peers' PyTorch peer).
//   deepseek_v3_debug: model.architecture deepseek_v3 at debug's scale (latent attention
//          with q_lora_rank 64, kv_lora_rank 64, head dims 32 + 16 and 32; YaRN 4x
//          past 128 positions; 8 experts in 4 groups choosing from 2, route_scale 2.5);
//          seq_len 256, batch_size 8.
//   deepseek_v3_16b, deepseek_v3_671b: torchtitan's DeepSeek-V3 flavours of those names
//          (presets.cc has every key); seq_len 4096, batch_size 1.
//   qwen3_moe_debug: model.architecture qwen3_moe at debug's scale (head_dim 48, no
//          dense layer, no shared expert, softmax top-2, rope_theta 1e6, no router
//          bias: load_balance_coeff 0); seq_len 256,
//          batch_size 8.
//   qwen3_30b_a3b, qwen3_235b_a22b: the Qwen3-MoE models' config.json values; seq_len
//          4096, batch_size 1.
// Every other key's default is the member initialiser in job_spec.h.
//
// Resolve: start from the defaults, apply the preset named by model.preset (default
// "debug"), then every given key (given keys always win). warmup_steps, when not
// given, is min(10, steps); step_timeout_s, when not given, is kDefaultCudaStepTimeoutS
// for resources.device="cuda" and 0 otherwise. After an OK return model.preset names the preset used.
// Error: model.preset names no preset. Values are not range-checked here (Validate).
Result<JobSpec> Resolve(const SpecInput& input);

// Resolve, then Validate (rules.h). An error names the field and, when the field was
// given, where (file:line, --set).
Result<JobSpec> ResolveAndValidate(const SpecInput& input);

// The given keys of a resolved spec: every field (what a full JSON spec or a stored
// proto says), so Resolve(AllKeys(s)) == s.
SpecInput AllKeys(const JobSpec& spec);

// The resolved, validated spec of `preset` with "section.key=value" overrides, as a
// test or the benchmark starts from. Errors as ResolveAndValidate.
Result<JobSpec> FromPreset(const std::string& preset, const std::vector<std::string>& overrides = {});

}  // namespace trainyard::spec
