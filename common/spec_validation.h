#pragma once

#include "absl/status/status.h"
#include "trainyard/v1/spec.pb.h"

namespace trainyard {

// Pass as total_connected_slots to skip the world-size-versus-fleet check.
inline constexpr int kSkipSlotCheck = -1;

// Checks a normalised JobSpec (ApplyPresetAndDefaults already ran). Pure: no I/O, no
// clock. Returns OK or INVALID_ARGUMENT naming the field and the rule; the first
// failure wins, in this order:
//   1. ranges: model sizes, training.steps/batch_size/seq_len/log_freq, parallelism
//      dp/tp/ep, lr, norm_eps, rope_theta, route_scale, max_norm and
//      collective_timeout_s must be positive; n_shared_experts, warmup_steps,
//      load_balance_coeff, checkpoint interval/keep, ranks_per_worker, max_restarts
//      and profiling.warmup must be >= 0; n_dense_layers in [0, n_layers]; top_k in
//      [1, n_routed_experts]; recompile_limit >= 1; summary_every >= 1;
//      profiling freq >= 1, active >= 1,
//      warmup + active <= freq; job.priority in [-1000, 1000]; job.name 1..128 chars
//      of [A-Za-z0-9._-]; paths at most 4096 bytes.
//      e.g. "model.dim must be positive, got 0"
//   2. enums: model.score_func, training.dataset, compile.backend, compile.regions,
//      compile.on_side_effect, activation_checkpoint.mode, resources.device.
//      e.g. `compile.backend: unknown backend "fast" (known: eager, jit, cudagraph)`
//   3. model shape: dim % n_heads == 0, n_heads % n_kv_heads == 0, head_dim even (RoPE
//      rotates pairs).
//   4. TP: tp divides n_heads and n_kv_heads, ffn_hidden and expert_hidden; tp fits
//      in resources.ranks_per_worker when that is set (a TP group never spans workers).
//      e.g. "parallelism.tp=3 must divide model.n_heads=8 and model.n_kv_heads=4"
//   5. EP: ep divides n_routed_experts, and ep divides dp·tp.
//      e.g. "parallelism.ep=3 must divide model.n_routed_experts=8"
//   6. datasets "text" and "tokens" need training.dataset_path.
//   7. world size dp·tp must fit in total_connected_slots (unless kSkipSlotCheck).
//      e.g. "world size dp·tp=16 exceeds the 4 slots of all connected workers ..."
absl::Status ValidateJobSpec(const v1::JobSpec& normalised, int total_connected_slots);

// Legal configurations this release cannot run yet. Returns UNIMPLEMENTED naming the
// first such setting (backend cudagraph, profiling, periodic or initial checkpoints,
// device cuda, datasets other than synthetic), e.g.
// "profiling.enable=true: the profiler is not built yet". Backends eager and jit,
// activation_checkpoint modes none/full/selective and both compile.regions are
// supported. Call after ValidateJobSpec (which refuses unknown enum values).
absl::Status CheckSupported(const v1::JobSpec& normalised);

}  // namespace trainyard
