// Averages gradients across DP ranks with a few large all-reduces instead of one per
// parameter: gradients are packed into flat buckets of about kBucketElements, summed,
// scaled by 1/world and copied back. A parameter without a gradient on this rank (an
// expert no token chose) contributes zeros, so every rank sends identical layouts.
// Not thread-safe; owned by the Trainer.
#pragma once

#include <vector>

#include <torch/torch.h>

#include "worker/engine/collective_group.h"

namespace trainyard::engine {

class GradientSynchronizer {
 public:
  static constexpr int64_t kBucketElements = int64_t{8} << 20;  // 32 MiB of fp32

  GradientSynchronizer(std::vector<torch::Tensor> params, CollectiveGroup& group);

  void AverageGradients();

 private:
  std::vector<torch::Tensor> params_;
  CollectiveGroup& group_;
  std::vector<std::vector<size_t>> buckets_;  // parameter indices per bucket
  std::vector<torch::Tensor> flat_;           // one reusable buffer per bucket
};

}  // namespace trainyard::engine
