// Differentiable collectives (custom torch::autograd::Function pairs). Each is the
// identity, with no communication, when its group is null (a group of one).
//
// Megatron's conjugate pair around a tensor-parallel region:
//   CopyToRegion:     forward identity,    backward all-reduce (sum) over the group.
//                     A replicated activation feeds sharded weights; each rank's grad
//                     is partial, their sum is the true grad.
//   ReduceFromRegion: forward all-reduce,  backward identity.
//                     Row-parallel outputs are partial sums; the reduced value is
//                     replicated, so its (replicated) grad goes back unchanged.
// AllToAllRows: forward row all-to-all with (out_splits, in_splits), backward the
// reverse all-to-all with the splits swapped: dispatch's backward is combine, and
// vice versa. Every member must run each of these in the same order, which holds
// because every rank builds the same graph.
#pragma once

#include <cstdint>
#include <vector>

#include <torch/torch.h>

namespace trainyard::engine {

class CollectiveGroup;

torch::Tensor CopyToRegion(const torch::Tensor& x, CollectiveGroup* group);
torch::Tensor ReduceFromRegion(const torch::Tensor& x, CollectiveGroup* group);
torch::Tensor AllToAllRows(const torch::Tensor& x, CollectiveGroup* group,
                           const std::vector<int64_t>& out_splits,
                           const std::vector<int64_t>& in_splits);

}  // namespace trainyard::engine
