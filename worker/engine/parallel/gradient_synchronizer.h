// Reduces gradients over one process group with a few large all-reduces instead of one
// per parameter: gradients are packed into flat buckets of about kBucketElements,
// summed, multiplied by `scale` and copied back. The trainer keeps one per gradient
// class, since the group and scale differ: dense params average over the DP group,
// the router sums over TP and averages over DP (the world group, scale 1/dp), and
// expert params sum over the expert-DP group with scale 1/dp (see parameter_sharding.h).
// A parameter without a gradient on this rank (an expert no token chose) contributes
// zeros, so every rank sends identical layouts. Not thread-safe; owned by the Trainer.
#pragma once

#include <vector>

#include <torch/torch.h>

#include "worker/engine/parallel/mesh/collective_group.h"

namespace trainyard::engine {

class GradientSynchronizer {
 public:
  static constexpr int64_t kBucketElements = int64_t{8} << 20;  // 32 MiB of fp32

  GradientSynchronizer(std::vector<torch::Tensor> params, CollectiveGroup& group, double scale);

  // grad = scale · Σ_group grad. The scale applies even to a group of one.
  void Reduce();

 private:
  std::vector<torch::Tensor> params_;
  CollectiveGroup& group_;
  double scale_;
  std::vector<std::vector<size_t>> buckets_;  // parameter indices per bucket
  std::vector<torch::Tensor> flat_;           // one reusable buffer per bucket
};

}  // namespace trainyard::engine
