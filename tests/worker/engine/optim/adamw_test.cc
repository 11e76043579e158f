// The engine's AdamW against torch::optim::AdamW over several steps: the fused float32
// CPU pass to float rounding, the tensor-op path exactly, and the clip scale as a
// pre-multiplied gradient.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "worker/engine/kernels/cpu/fused_cpu_kernels.h"
#include "worker/engine/optim/adamw.h"

namespace trainyard::engine {
namespace {

using torch::Tensor;

// Runs `steps` steps on copies of `init` with fixed per-step gradients; returns the
// final parameters. `scale` multiplies the gradients given to torch (the clip).
std::vector<Tensor> RunTorch(const std::vector<Tensor>& init, const std::vector<std::vector<Tensor>>& grads,
                             const std::vector<double>& lrs, double scale, const AdamWOptions& o) {
  std::vector<Tensor> params;
  for (const auto& t : init) params.push_back(t.clone().requires_grad_(true));
  torch::optim::AdamW opt(params, torch::optim::AdamWOptions(lrs[0])
                                      .betas({o.beta1, o.beta2})
                                      .eps(o.eps)
                                      .weight_decay(o.weight_decay));
  for (size_t s = 0; s < grads.size(); ++s) {
    for (size_t i = 0; i < params.size(); ++i) params[i].mutable_grad() = grads[s][i] * scale;
    static_cast<torch::optim::AdamWOptions&>(opt.param_groups()[0].options()).lr(lrs[s]);
    opt.step();
  }
  return params;
}

std::vector<Tensor> RunOurs(const std::vector<Tensor>& init, const std::vector<std::vector<Tensor>>& grads,
                            const std::vector<double>& lrs, double scale, const AdamWOptions& o) {
  std::vector<Tensor> params;
  for (const auto& t : init) params.push_back(t.clone().requires_grad_(true));
  AdamW opt(params, o);
  for (size_t s = 0; s < grads.size(); ++s) {
    for (size_t i = 0; i < params.size(); ++i) params[i].mutable_grad() = grads[s][i].clone();
    opt.Step(lrs[s], scale);
    for (size_t i = 0; i < params.size(); ++i) {
      EXPECT_TRUE(params[i].grad().equal(grads[s][i])) << "gradients must be left alone";
    }
  }
  EXPECT_EQ(opt.steps(), static_cast<int64_t>(grads.size()));
  return params;
}

class AdamWTest : public ::testing::Test {
 protected:
  void SetUp() override {
    torch::manual_seed(11);
    // Sizes that leave partial chunks for the parallel loop.
    init_ = {torch::randn({70000}), torch::randn({13, 7}), torch::randn({3})};
    for (int s = 0; s < 6; ++s) {
      std::vector<Tensor> g;
      for (const auto& t : init_) g.push_back(torch::randn(t.sizes()) * (s + 1) * 0.1);
      grads_.push_back(g);
      lrs_.push_back(1e-3 * (s + 1));
    }
  }
  void TearDown() override { fused::SetEnabled(true); }

  std::vector<Tensor> init_;
  std::vector<std::vector<Tensor>> grads_;
  std::vector<double> lrs_;
  AdamWOptions options_{0.9, 0.95, 1e-8, 0.1};
};

TEST_F(AdamWTest, FusedPassMatchesTorchAdamWToFloatRounding) {
  for (double scale : {1.0, 0.37}) {
    const auto ref = RunTorch(init_, grads_, lrs_, scale, options_);
    const auto ours = RunOurs(init_, grads_, lrs_, scale, options_);
    for (size_t i = 0; i < ref.size(); ++i) {
      // Moved by ~6e-3 per step; float rounding differs by far less.
      const double moved = (ref[i] - init_[i]).abs().max().item<double>();
      ASSERT_GT(moved, 1e-3);
      EXPECT_LT((ours[i] - ref[i]).abs().max().item<double>(), 1e-6) << "param " << i << " scale " << scale;
    }
  }
}

TEST_F(AdamWTest, TensorOpPathIsTorchAdamWExactly) {
  fused::SetEnabled(false);
  const auto ref = RunTorch(init_, grads_, lrs_, 1.0, options_);
  const auto ours = RunOurs(init_, grads_, lrs_, 1.0, options_);
  for (size_t i = 0; i < ref.size(); ++i) EXPECT_TRUE(ours[i].equal(ref[i])) << "param " << i;
}

}  // namespace
}  // namespace trainyard::engine
