// RMSNorm: x · rsqrt(mean(x²) + eps) · weight, over the last dimension.
// Not thread-safe (a torch module); owned by its parent block.
#pragma once

#include <torch/torch.h>

namespace trainyard::engine {

class RMSNormImpl : public torch::nn::Module {
 public:
  RMSNormImpl(int64_t dim, double eps);
  torch::Tensor forward(const torch::Tensor& x);

  torch::Tensor weight;

 private:
  double eps_;
};
TORCH_MODULE(RMSNorm);

}  // namespace trainyard::engine
