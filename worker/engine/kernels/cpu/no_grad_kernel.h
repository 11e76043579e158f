// NoGrad<decltype(K), K>::Call runs the operator kernel K under torch::NoGradGuard. The
// fused operators register their autograd::Function wrappers at AutogradCPU, and this
// form at CPU: the CPU key is reached only below autograd (inference tensors, or a
// caller that excluded autograd), where nothing may be recorded.
#pragma once

#include <torch/torch.h>

namespace trainyard::engine::fused {

template <typename Sig, Sig* kernel>
struct NoGrad;

template <typename R, typename... Args, R (*kernel)(Args...)>
struct NoGrad<R(Args...), kernel> {
  static R Call(Args... args) {
    torch::NoGradGuard no_grad;
    return kernel(args...);
  }
};

}  // namespace trainyard::engine::fused
