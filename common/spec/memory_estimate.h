// The memory one rank of a job needs, estimated from its spec alone, so the controller
// can refuse a job no worker could hold (a `model.dim` of 2^30 passes every range rule
// and then fails in every rank). Plain C++: the controller and the engine both use it.
//
// fp32 training with AdamW, per rank:
//   parameters: embedding and output head (replicated), attention, dense FFN, shared
//     experts and router split by TP, and n_routed_experts / ep routed experts;
//   state: 16 bytes a parameter (weight, gradient, AdamW's two moments);
//   activations: per layer and token about 16·dim + 3·hidden floats (hidden = ffn_hidden
//     for a dense layer, (top_k + n_shared_experts)·expert_hidden for an MoE layer), plus
//     the attention scores and probabilities, 2·(n_heads/tp)·seq_len² floats per
//     sequence, and the logits with their gradient, 3·vocab_size floats per token;
//     activation_checkpoint full keeps one layer's and every layer's input, selective
//     half of everything.
// It leaves out allocator slack, communication buffers and the framework itself, so it
// is a floor: a job above a worker's memory cannot run there; one below may still not.
#pragma once

#include <cstdint>

#include "common/spec/job_spec.h"

namespace trainyard::spec {

// The model's parameters by part, as the engine's modules hold them (one count, used by
// engine::FlopsModel and by the estimate below; the engine's test checks it against the
// real module).
struct ParameterCounts {
  int64_t embedding = 0;    // tok_embeddings
  int64_t output = 0;       // the output head
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

struct MemoryEstimate {
  double total_params = 0;      // the whole model, as engine::FlopsModel counts it
  double rank_params = 0;       // held by one rank
  double state_bytes = 0;       // rank_params · 16
  double activation_bytes = 0;  // one rank's batch
  double total_bytes() const { return state_bytes + activation_bytes; }
};

// Doubles throughout, so absurd sizes (dim 2^30) stay finite and comparable.
MemoryEstimate EstimateRankMemory(const JobSpec& spec);

}  // namespace trainyard::spec
