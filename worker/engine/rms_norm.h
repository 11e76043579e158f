// RMSNorm: x · rsqrt(mean(x²) + eps) · weight, over the last dimension.
// Not thread-safe (a torch module); owned by its parent block.
#pragma once

#include <torch/torch.h>

#include "worker/engine/model_regions.h"

namespace trainyard::engine {

class RMSNormImpl : public torch::nn::Module {
 public:
  // `layer` names the call site in compile events (-1: not in a layer).
  RMSNormImpl(int64_t dim, double eps, RegionFactory& regions = EagerRegionFactory(), int layer = -1);
  torch::Tensor forward(const torch::Tensor& x);

  torch::Tensor weight;

 private:
  double eps_;
  RegionCall region_;
};
TORCH_MODULE(RMSNorm);

}  // namespace trainyard::engine
