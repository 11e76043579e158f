#include "worker/engine/dense_ffn.h"

namespace trainyard::engine {

FeedForwardImpl::FeedForwardImpl(int64_t dim, int64_t hidden) {
  w1 = register_module("w1", torch::nn::Linear(torch::nn::LinearOptions(dim, hidden).bias(false)));
  w2 = register_module("w2", torch::nn::Linear(torch::nn::LinearOptions(hidden, dim).bias(false)));
  w3 = register_module("w3", torch::nn::Linear(torch::nn::LinearOptions(dim, hidden).bias(false)));
}

torch::Tensor FeedForwardImpl::forward(const torch::Tensor& x) {
  return w2(torch::silu(w1(x)) * w3(x));
}

}  // namespace trainyard::engine
