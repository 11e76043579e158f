#include "worker/engine/optim/adamw.h"

#include <cmath>

#include <ATen/Parallel.h>

#include "worker/engine/kernels/cpu/fused_cpu_kernels.h"
#include "worker/engine/optim/adamw_update.h"

namespace trainyard::engine {

AdamW::AdamW(std::vector<torch::Tensor> params, AdamWOptions options)
    : params_(std::move(params)), options_(options) {
  torch::NoGradGuard no_grad;
  for (const auto& p : params_) {
    exp_avg_.push_back(torch::zeros_like(p, torch::MemoryFormat::Contiguous));
    exp_avg_sq_.push_back(torch::zeros_like(p, torch::MemoryFormat::Contiguous));
  }
}

void AdamW::Step(double lr, double grad_scale) {
  torch::NoGradGuard no_grad;
  ++step_;
  const double bias_correction1 = 1 - std::pow(options_.beta1, static_cast<double>(step_));
  const double bias_correction2 = 1 - std::pow(options_.beta2, static_cast<double>(step_));
  const double step_size = lr / bias_correction1;
  const double decay = 1 - lr * options_.weight_decay;
  for (size_t i = 0; i < params_.size(); ++i) {
    torch::Tensor& p = params_[i];
    if (!p.grad().defined()) continue;
    torch::Tensor& m = exp_avg_[i];
    torch::Tensor& v = exp_avg_sq_[i];
    if (!fused::Applies(p) || !p.is_contiguous() || !p.grad().is_contiguous()) {
      // torch::optim::AdamW's sequence.
      const torch::Tensor g = grad_scale == 1.0 ? p.grad() : p.grad() * grad_scale;
      if (options_.weight_decay != 0) p.mul_(decay);
      m.mul_(options_.beta1).add_(g, 1 - options_.beta1);
      v.mul_(options_.beta2).addcmul_(g, g, 1 - options_.beta2);
      const torch::Tensor denom = (v.sqrt() / std::sqrt(bias_correction2)).add_(options_.eps);
      p.addcdiv_(m, denom, -step_size);
      continue;
    }
    // The same arithmetic in float, one element at a time (adamw_update.cc).
    AdamWScalars s;
    s.scale = static_cast<float>(grad_scale);
    s.wd = static_cast<float>(decay);
    s.b1 = static_cast<float>(options_.beta1);
    s.a1 = static_cast<float>(1 - options_.beta1);
    s.b2 = static_cast<float>(options_.beta2);
    s.a2 = static_cast<float>(1 - options_.beta2);
    s.root_bc2 = static_cast<float>(std::sqrt(bias_correction2));
    s.eps = static_cast<float>(options_.eps);
    s.neg_step = static_cast<float>(-step_size);
    s.scaled = grad_scale != 1.0;
    s.decays = options_.weight_decay != 0;
    float *pp = p.data_ptr<float>(), *mp = m.data_ptr<float>(), *vp = v.data_ptr<float>();
    const float* gp = p.grad().data_ptr<float>();
    at::parallel_for(0, p.numel(), 1 << 14,
                     [&](int64_t begin, int64_t end) { AdamWUpdate(pp, mp, vp, gp, begin, end, s); });
  }
}

}  // namespace trainyard::engine
