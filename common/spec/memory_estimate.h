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
