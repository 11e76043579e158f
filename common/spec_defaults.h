#pragma once

#include "absl/status/status.h"
#include "trainyard/v1/spec.pb.h"

namespace trainyard {

// The preset used when model.preset is not given.
inline constexpr const char* kDefaultPreset = "debug";

// Normalises a JobSpec as parsed from a job file: model keys that are not set come from
// the preset named by model.preset (default "debug"), other unset keys from the
// defaults below. Keys that are set always win. After an OK return every optional
// field of every section is set, and model.preset names the preset used.
//
// Presets (DESIGN.md "Reference configuration"):
//   debug: vocab_size 2048, dim 256, n_layers 4, n_dense_layers 1, n_heads 8,
//          n_kv_heads 4, ffn_hidden 768, n_routed_experts 8, top_k 2,
//          n_shared_experts 1, expert_hidden 256, score_func sigmoid, route_norm true,
//          route_scale 1.0, rope_theta 10000, norm_eps 1e-5, load_balance_coeff 1e-3;
//          training.seq_len 256, training.batch_size 8.
//   tiny:  vocab_size 256, dim 64, n_layers 2, n_dense_layers 1, n_heads 4,
//          n_kv_heads 2, ffn_hidden 128, n_routed_experts 4, top_k 2,
//          n_shared_experts 1, expert_hidden 32, rest as debug;
//          training.seq_len 32, training.batch_size 4.
//
// Other defaults:
//   [job]                   name "job", priority 0
//   [training]              steps 100, lr 8e-4, warmup_steps 10 (lowered to steps when
//                           steps < 10 and warmup_steps is not given), max_norm 1.0,
//                           seed 42, dataset "synthetic", dataset_path "", log_freq 1
//   [parallelism]           dp 1, tp 1, ep 1, collective_timeout_s 300
//   [compile]               backend "eager", regions "per_layer", recompile_limit 8,
//                           on_side_effect "error", preflight false,
//                           summary_every 100, test_plant_side_effect false (test only)
//   [activation_checkpoint] mode "none"
//   [profiling]             enable false, freq 100, warmup 3, active 2
//   [checkpoint]            interval 0 (off), keep 3, initial_load_path ""
//   [resources]             device "cpu", ranks_per_worker 0 (as many as fit)
//   [restart]               max_restarts 0
//
// Errors: INVALID_ARGUMENT for an unknown preset, e.g.
//   model.preset: unknown preset "huge" (known: debug, tiny)
// Values are not range-checked here; that is ValidateJobSpec's job.
absl::Status ApplyPresetAndDefaults(v1::JobSpec* spec);

// Number of ranks of a job: dp·tp (EP groups are carved out of the same ranks).
// Unset sizes count as 1; saturates at INT_MAX rather than overflowing.
int WorldSize(const v1::JobSpec& spec);

}  // namespace trainyard
