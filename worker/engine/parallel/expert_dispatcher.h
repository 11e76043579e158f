// Expert-parallel token exchange for one MoE layer. The routed experts are sharded
// across the EP group: member j holds global experts [j·E/ep, (j+1)·E/ep).
//
// Dispatch: (1) all-to-all of the per-expert token counts, so each member learns how
// many rows it will receive from each peer for each of its experts; (2) all-to-all of
// the token rows themselves; (3) a local permutation from "by source peer" to "by
// local expert" order so GroupedExperts sees one contiguous slice per expert.
// Combine undoes (3) and (2). The token all-to-alls are differentiable: backward of
// dispatch is the reverse all-to-all and vice versa (AllToAllRows).
// Everything Combine needs comes back from Dispatch as a DispatchPlan value; the
// dispatcher holds no per-step state, so recompute can never read a stale plan.
// Immutable after construction; not thread-safe only because collectives are not.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

namespace trainyard::engine {

class CollectiveGroup;

struct DispatchPlan {
  std::vector<int64_t> send_splits;   // rows this rank sends to each EP member
  std::vector<int64_t> recv_splits;   // rows this rank receives from each EP member
  std::vector<int64_t> local_counts;  // rows per local expert, in expert-major order
  torch::Tensor to_expert_major;      // received row order -> expert-major (undefined: identity)
  torch::Tensor to_peer_major;        // its inverse
};

struct Dispatched {
  torch::Tensor tokens;  // [sum(local_counts), dim], grouped by local expert
  DispatchPlan plan;
};

class ExpertDispatcher {
 public:
  // ep_group null means ep == 1: dispatch and combine are the identity.
  ExpertDispatcher(int64_t n_experts, CollectiveGroup* ep_group);

  // rows: [n, dim] sorted by global expert; counts: [n_experts] int64, sum m <= n. Only
  // the first m rows are dispatched: the rest (dropped by the capacity) stay behind.
  Dispatched Dispatch(const torch::Tensor& rows, const torch::Tensor& counts) const;

  // expert_out: [sum(plan.local_counts), dim] in Dispatch's output order. Returns the
  // dispatched rows back on the ranks and in the order that went into Dispatch.
  torch::Tensor Combine(const torch::Tensor& expert_out, const DispatchPlan& plan) const;

  int64_t n_local_experts() const { return n_local_; }

 private:
  int64_t n_experts_;
  int64_t n_local_;
  int ep_;
  CollectiveGroup* group_;
};

}  // namespace trainyard::engine
