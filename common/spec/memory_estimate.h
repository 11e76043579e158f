// The memory one rank of a job needs at its peak, estimated from its spec alone, so the
// controller can refuse a job no worker could hold (a `model.dim` of 65536 passes every
// range rule and then fails in every rank) and name a layout that would fit, and
// `trainyard preflight` / `explain` can print where the bytes go. Plain C++: the
// controller, the CLI and the engine all use it. docs/memory.md has the formulas.
//
// It models the engine's own tensors, step by step (AdamW, gradients set to none before
// each step, autograd's saved tensors, activation checkpointing, the fused CPU kernels
// for fp32 on CPU and the composite LibTorch ops elsewhere and for bf16):
//   parameters      fp32 master weights, 4 B a parameter the rank holds;
//   gradients       fp32, 4 B a parameter, those that exist at the peak (they are
//                   dropped before each step and appear layer by layer in backward;
//                   with training.grad_accum_steps > 1 all of them after micro-batch 1);
//   optimizer       AdamW's m and v, fp32, 8 B a parameter;
//   compute weights what a forward keeps of the weights beside the fp32 masters: bf16
//                   copies (2 B a parameter of every weight a region casts: all but the
//                   token embedding; all kept with activation_checkpoint none, the
//                   attention's dropped by selective, one layer's at a time under full
//                   plus the output head's), or off the fused CPU path in fp32 the
//                   concatenated q|k|v weight of each layer;
//   activations     autograd's saved tensors at the peak plus that moment's transients
//                   (the loss's fp32 logit gradients, one layer's backward buffers or
//                   recompute); bf16 activations are 2 B, except what the engine keeps
//                   in fp32: RMSNorm's fp32 input copy and its square, the softmax's
//                   fp32 probabilities (kept for its backward beside the bf16 ones),
//                   the router's scores and the loss's log-probabilities;
//   communication   the gradient-reduction buckets (the engine allocates a flat fp32
//                   buffer for every ~32 MiB bucket of each class, dense/router/expert,
//                   at start-up: 4 B a parameter) and the EP all-to-all send and
//                   receive rows of one MoE layer when the peak is inside one;
//   other           RoPE tables, the causal masks each attention layer caches, the batch;
//                   the MFU GEMM probe's operands when it is the peak.
// The peak is the largest of: the loss's backward, the backward of each layer (its
// FFN/MoE half, then its attention half), the end of backward, and the GEMM peak probe
// between steps (with the last step's gradients). On the debug preset it is within 1 %
// of the engine's tracked tensor bytes in fp32 and bf16 (a few % over inside a layer's
// backward under activation_checkpoint full; docs/memory.md has the table).
//
// Sharded data parallelism (parallelism.dp_shard = S > 1, FSDP): every parameter is
// sharded on dim 0 of its TP/EP-local tensor over its FSDP group, the routed experts over
// S_e = S·tp/ep ranks when ep divides S·tp (else S_e = 1: not sharded), the rest over S
// (counted as elements / S, not per-tensor rows). Between steps a rank holds the shards
// only: fp32 parameter, fp32 gradient and AdamW m and v, 16 B a parameter / S (or S_e):
// state_bytes. The step all-gathers every sharded parameter at its start
// (gathered_bytes); in the last backward each layer's non-expert gradients go into
// their buckets as the layer finishes (the engine's overlap, on by default), and then
// their full gradients and gathered weights are freed, so at each moment of backward
// `parameters` is the shards plus what is still gathered, `gradients` what is not yet
// packed, `communication` the buckets launched so far (sharded buckets live from their
// launch to the end of the reduction); the routed experts launch after backward. The end
// of backward adds the reduction's shard gradients (4 B / S); the probe holds the shards
// alone. A bf16 job's all-gather moves bf16 buffers (2 B a parameter, freed as each
// layer is unpacked): they exist only at the step's start, on top of less than the
// loss's backward holds, so that moment is not modelled and the buffers are left out.
// With TRAINYARD_OVERLAP_GRAD_REDUCE=0 nothing launches in backward: the real peak is
// higher than this.
//
// Left out: allocator caching and fragmentation, the CUDA context and NCCL's or Gloo's
// own buffers, cuBLAS/oneDNN workspaces, kernel scratch (per-thread attention rows),
// small index and routing tensors below about 1 % of a layer, the forward-time
// transients (below the backward's), compile.backend=jit's different saved set, the
// evaluator, checkpoint writes and routing imbalance (the EP rows assume balanced
// routing). Doubles throughout, so absurd sizes (dim 2^30) stay finite.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/spec/job_spec.h"

namespace trainyard::spec {

// The model's parameters by part, as the engine's modules hold them (one count, used by
// engine::FlopsModel and by the estimate below; the engine's test checks it against the
// real module).
struct ParameterCounts {
  int64_t embedding = 0;  // tok_embeddings
  int64_t output = 0;     // the output head
  int64_t final_norm = 0;
  int64_t attention = 0;    // per layer: wq, wk, wv, wo
  int64_t layer_norms = 0;  // per layer: attention_norm, ffn_norm
  int64_t dense_ffn = 0;    // per dense layer: w1, w2, w3
  int64_t expert = 0;       // one routed expert
  int64_t router = 0;       // per MoE layer
  int64_t shared = 0;       // per MoE layer: all shared experts
  int64_t dense_layer() const { return attention + layer_norms + dense_ffn; }
  int64_t moe_layer(int64_t experts) const { return attention + layer_norms + router + shared + expert * experts; }
  int64_t total = 0;
};
// Fits int64 for every model the rules admit (at most ~1e18 at the largest sizes).
ParameterCounts CountParameters(const ModelSpec& model);

// Model FLOPs per token (docs/architecture.md), by part: 6 a parameter a token touches
// (top_k of the routed experts; the embedding is a lookup and counts none) plus each
// layer's attention scores and weighted sum over seq_len positions (6 a multiply-add
// over the query/key width and the value width). One count, for engine::FlopsModel (the
// MFU) and the pipeline split (pipeline_stages.h).
struct FlopCounts {
  int64_t active_params = 0;  // the non-embedding parameters one token touches (output included)
  double attention = 0;       // per layer: scores and weighted sum
  double head = 0;            // final norm and output head
  double dense_layer = 0;     // one dense layer, its attention included
  double moe_layer = 0;       // one MoE layer, its attention included
  double per_token = 0;       // the model: 6 · active_params + n_layers · attention
};
FlopCounts CountFlops(const ModelSpec& model, int64_t seq_len);

// Bytes one rank holds at its estimated peak, by kind (the header comment); they sum
// to total().
struct MemoryBreakdown {
  double parameters = 0;
  double gradients = 0;
  double optimizer = 0;
  double compute_weights = 0;
  double activations = 0;
  double communication = 0;
  double other = 0;
  double total() const {
    return parameters + gradients + optimizer + compute_weights + activations + communication + other;
  }
};

struct MemoryEstimate {
  double total_params = 0;      // the whole model, as engine::FlopsModel counts it
  double rank_params = 0;       // held by one rank (TP/EP-local, whole)
  int shard_degree = 1;         // S = parallelism.dp_shard: FSDP group of every non-expert
  int expert_shard_degree = 1;  // S_e: the routed experts' FSDP group (1: not sharded)
  double shard_params = 0;      // of rank_params kept between steps (= rank_params unsharded)
  double gathered_bytes = 0;    // the step's full fp32 copy of the sharded parameters (0 unsharded)
  double state_bytes = 0;       // shard_params · 16: weights, gradients, AdamW's moments between steps
  double activation_bytes = 0;  // = peak.activations
  MemoryBreakdown peak;         // at the peak
  double all_gradients = 0;     // rank_params · 4, of which peak.gradients exist then
  double bucket_bytes = 0;      // the gradient-reduction buckets in peak.communication
                                // (sharded: those launched by the peak's moment)
  std::string peak_at;          // "the loss's backward", "the backward of layer 3's MoE", ...
  bool fused_cpu = false;       // fp32 on CPU: the fused kernels' saved tensors
  double total_bytes() const { return peak.total(); }
};

MemoryEstimate EstimateRankMemory(const JobSpec& spec);
// The state one rank keeps between steps: fp32 parameters, their gradients and AdamW's
// m and v, 16 B for each parameter it holds (its shards under dp_shard > 1): state_bytes.
double PersistentStateBytes(const JobSpec& spec);

// "3.2 GiB", "512 MiB", "4.1e+03 TiB" (three significant digits, binary units).
std::string FormatBytes(double bytes);
// "dp=1 dp_shard=1 tp=1 ep=1 activation_checkpoint.mode=none training.mixed_precision=fp32".
std::string DescribeLayout(const JobSpec& spec);
// "parameters 29.5 MiB, gradients 0 B, optimizer 59.1 MiB, activations 249 MiB, ..." in
// the order of MemoryBreakdown, the parts that are 0 left out except gradients; sharded,
// "parameters 33.2 MiB (29.5 MiB of them gathered for the step), ...".
std::string DescribeBreakdown(const MemoryEstimate& estimate);

// A layout of the same world size (dp·tp) that fits `limit_bytes` per rank
// (layout_suggestion.cc). The candidates are every (tp, dp_shard, ep) the spec rules
// (rules.h Validate) accept with dp = world / tp and dp_shard a divisor of that dp, times
// every activation_checkpoint.mode; they are ranked by how many keys differ from the
// spec (parallelism.dp and .tp count as one change, since the world size ties them; an
// explicit dp_replicate follows dp_shard, as dp / dp_shard, and is named with it), then
// by the smaller estimate, then by the order of the axes (tp, dp_shard, ep, mode;
// smaller values first).
struct LayoutSuggestion {
  bool fits = false;                 // a candidate fits; else `spec` is the smallest
  JobSpec spec;                      // the suggested (or smallest) layout
  std::vector<std::string> changed;  // "dp_shard=4", "ep=8", "activation_checkpoint.mode=full"
  MemoryEstimate estimate;
  int candidates = 0;  // layouts the rules accepted
};
LayoutSuggestion SuggestLayout(const JobSpec& spec, double limit_bytes);
// "fits at ep=8 activation_checkpoint.mode=full: 24.9 GiB", or "no layout of dp·tp=8
// ranks fits (the smallest, ep=8 activation_checkpoint.mode=full, needs 90.1 GiB)".
std::string DescribeSuggestion(const JobSpec& spec, const LayoutSuggestion& suggestion);

}  // namespace trainyard::spec
