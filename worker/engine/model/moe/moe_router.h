// Token-choice top-k router parameters: a bias-free gate whose sigmoid or softmax
// scores choose experts (with expert_bias added, aux-loss-free balancing) and weight
// them (unbiased). The routing itself is the `router` region (below): a pure
// function, so recompute (activation checkpointing) can never double-count.
// Not thread-safe (a torch module).
#pragma once

#include <torch/torch.h>

#include <string>

#include "worker/engine/compile/region/region_fn.h"
#include "worker/engine/compile/region/region_key.h"

namespace trainyard::engine {

class TokenChoiceRouterImpl : public torch::nn::Module {
 public:
  TokenChoiceRouterImpl(int64_t dim, int64_t n_experts);

  torch::nn::Linear gate{nullptr};
};
TORCH_MODULE(TokenChoiceRouter);

namespace regions {

// The router region. inputs: x [n, dim], expert_bias [E]; params: gate weight [E, dim].
// outputs: rows [n·k, dim] sorted by expert (stable, so token order within an expert is
// kept), gates [n·k, 1] in that order, token ids [n·k] int64, tokens per expert [E]
// int64. `plant_into`, when defined, is written with the counts during forward: the
// test-only planted side effect (compile.test_plant_side_effect), which the compile
// layer must catch.
//
// capacity_factor > 0 (model.capacity_factor) and x [g, s, dim], g groups (sequences)
// of s tokens: each expert keeps at most C = ExpertCapacity(s, k, E, factor) of a
// group's assignments, those with the highest gates (Megatron's "probs" policy). The
// rows of dropped assignments come last, after every expert's kept rows, with their
// gates zeroed, and a fifth output gives the kept rows per expert [E] int64; the
// fourth (tokens per expert, for the load balance) still counts every routed
// assignment. Computed on the device: no host read. A 2-D x is routed dropless: the
// callers pass one where CapacityCanDrop is false, so such a step is the dropless
// step bit for bit (the same autograd graph, not just the same values).
compile::RegionKey RouterKey(int64_t dim, int64_t n_experts, int64_t top_k, const std::string& score_func,
                             bool route_norm, double route_scale, double capacity_factor = 0, int64_t n_groups = 1,
                             int64_t limited_groups = 1);
compile::RegionFn Router(int64_t top_k, std::string score_func, bool route_norm, double route_scale,
                         torch::Tensor plant_into = {}, double capacity_factor = 0, int64_t n_groups = 1,
                         int64_t limited_groups = 1);

// Group-limited routing: `choice` [n, experts] (scores plus bias) with every expert
// outside each row's `limited_groups` best of `n_groups` equal groups set to -inf; a
// group scores by the sum of its two best experts. n_groups <= 1: `choice` itself.
torch::Tensor LimitToBestGroups(const torch::Tensor& choice, int64_t n_groups, int64_t limited_groups);

// ceil(s·k/E · factor), at most s (a token picks an expert once): the assignments one
// expert keeps from a group of s tokens.
int64_t ExpertCapacity(int64_t s, int64_t top_k, int64_t n_experts, double capacity_factor);
// capacity_factor > 0 and ExpertCapacity(...) < s.
bool CapacityCanDrop(int64_t s, int64_t top_k, int64_t n_experts, double capacity_factor);

}  // namespace regions

}  // namespace trainyard::engine
