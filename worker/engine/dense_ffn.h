// SwiGLU feed-forward: w2(silu(w1 x) ⊙ w3 x), no biases. Used for the dense layers and
// as the MoE shared expert. Not thread-safe (a torch module).
#pragma once

#include <torch/torch.h>

namespace trainyard::engine {

class FeedForwardImpl : public torch::nn::Module {
 public:
  FeedForwardImpl(int64_t dim, int64_t hidden);
  torch::Tensor forward(const torch::Tensor& x);

  torch::nn::Linear w1{nullptr}, w2{nullptr}, w3{nullptr};
};
TORCH_MODULE(FeedForward);

}  // namespace trainyard::engine
