// Shared helpers for the compile-layer tests: independent eager references and
// forward+backward runs that return outputs and gradients.
#pragma once

#include <functional>
#include <vector>

#include <torch/torch.h>

namespace trainyard::engine::compile::testing {

using Tensors = std::vector<torch::Tensor>;
using TwoArgFn = std::function<Tensors(const Tensors&, const Tensors&)>;

// New leaves with the same values and requires_grad, so two runs get separate grads.
inline Tensors Fresh(const Tensors& ts) {
  Tensors out;
  for (const auto& t : ts) out.push_back(t.detach().clone().requires_grad_(t.requires_grad()));
  return out;
}

struct FwdBwd {
  Tensors outputs;  // detached
  Tensors grads;    // one per input then param; undefined where no grad
};

// Runs f, differentiates sum_j <out_j, linspace(-1, 1)> (a fixed, non-uniform
// cotangent) with respect to every input and param (nothing accumulates in .grad).
inline FwdBwd RunFwdBwd(const TwoArgFn& f, const Tensors& inputs, const Tensors& params) {
  Tensors out = f(inputs, params);
  torch::Tensor loss;
  for (const auto& o : out) {
    if (!o.requires_grad()) continue;
    auto term = (o * torch::linspace(-1, 1, o.numel(), o.options()).view_as(o)).sum();
    loss = loss.defined() ? loss + term : term;
  }
  FwdBwd r;
  for (const auto& o : out) r.outputs.push_back(o.detach());
  Tensors all(inputs);
  all.insert(all.end(), params.begin(), params.end());
  Tensors wrt;
  for (const auto& t : all) {
    if (t.requires_grad()) wrt.push_back(t);
  }
  Tensors g;
  if (loss.defined() && !wrt.empty()) {
    g = torch::autograd::grad({loss}, wrt, {}, /*retain_graph=*/false, /*create_graph=*/false,
                              /*allow_unused=*/true);
  }
  size_t k = 0;
  for (const auto& t : all) r.grads.push_back(t.requires_grad() && k < g.size() ? g[k++] : torch::Tensor());
  return r;
}

// max|a - b| / max|b|; 0 when both are zero.
inline double MaxRelErr(const torch::Tensor& a, const torch::Tensor& b) {
  const double scale = b.abs().max().item<double>();
  const double diff = (a - b).abs().max().item<double>();
  return scale == 0 ? diff : diff / scale;
}

// RMSNorm followed by a SwiGLU FFN with a residual: inputs {x}, params {w, w1, w2, w3}.
inline Tensors RmsSwiGlu(const Tensors& in, const Tensors& p) {
  const auto& x = in[0];
  auto h = x * torch::rsqrt(x.pow(2).mean({-1}, /*keepdim=*/true) + 1e-6) * p[0];
  auto y = torch::matmul(torch::silu(torch::matmul(h, p[1].t())) * torch::matmul(h, p[3].t()), p[2].t());
  return {x + y};
}

inline Tensors RmsSwiGluParams(int64_t dim, int64_t hidden, uint64_t seed) {
  torch::manual_seed(seed);
  return {(1 + 0.1 * torch::randn({dim})).requires_grad_(), (0.1 * torch::randn({hidden, dim})).requires_grad_(),
          (0.1 * torch::randn({dim, hidden})).requires_grad_(), (0.1 * torch::randn({hidden, dim})).requires_grad_()};
}

}  // namespace trainyard::engine::compile::testing
