// AdamW as torch::optim::AdamW computes it (decoupled weight decay, bias-corrected
// moments, eps added after the square root), with the global-norm clip folded in as a
// gradient scale. On float32 CPU parameters each update is one parallel pass over the
// parameter, its gradient and both moments, where torch::optim::AdamW makes about nine
// (and allocates the denominator); results agree with it to float rounding (ATen's
// vectorised add uses a fused multiply-add, this loop does not). Elsewhere (CUDA) it runs
// torch::optim::AdamW's own tensor ops. Not thread-safe; owned by the Trainer.
#pragma once

#include <cstdint>
#include <vector>

#include <torch/torch.h>

namespace trainyard::engine {

struct AdamWOptions {
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 1e-2;
};

class AdamW {
 public:
  AdamW(std::vector<torch::Tensor> params, AdamWOptions options);

  // One step at learning rate `lr` with every gradient multiplied by `grad_scale` (the
  // clip coefficient; 1 leaves them alone). Parameters without a gradient are skipped.
  // Gradients are read, not modified.
  void Step(double lr, double grad_scale = 1.0);

  int64_t steps() const { return step_; }
  // The moments of parameter i (handles sharing storage: a checkpoint load copies into
  // them) and the step count, which a resume restores with set_steps.
  torch::Tensor exp_avg(size_t i) const { return exp_avg_[i]; }
  torch::Tensor exp_avg_sq(size_t i) const { return exp_avg_sq_[i]; }
  size_t size() const { return params_.size(); }
  void set_steps(int64_t steps) { step_ = steps; }

 private:
  std::vector<torch::Tensor> params_, exp_avg_, exp_avg_sq_;
  AdamWOptions options_;
  int64_t step_ = 0;
};

}  // namespace trainyard::engine
