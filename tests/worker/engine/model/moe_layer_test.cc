// The sorted/grouped MoE against a dense reference that runs every expert on every
// token and masks by the gates; routing counts against a hand-built routing.
#include "worker/engine/model/moe/moe_layer.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "tests/worker/engine/model/small_moe.h"
#include "worker/engine/config/engine_config.h"

namespace trainyard::engine {
namespace {

using testing::AllExpertsReference;
using testing::GateByHand;
using testing::RandomInitSmallMoE;
using testing::SetOneHotRouter;
using testing::SmallMoEConfig;

class MoEVsDenseTest : public ::testing::TestWithParam<std::string> {};

TEST_P(MoEVsDenseTest, OutputAndGradientsMatch) {
  const ModelConfig c = SmallMoEConfig(GetParam());
  MoE moe(c);
  RandomInitSmallMoE(moe, 3);
  auto x = torch::randn({2, 5, c.dim});
  auto target = torch::randn({2, 5, c.dim});

  MoEOutput got = moe(x);
  ((got.out - target).pow(2)).sum().backward();
  std::vector<torch::Tensor> grads;
  for (auto& p : moe->parameters()) grads.push_back(p.grad().clone());
  moe->zero_grad();

  const auto flat = x.reshape({-1, c.dim});
  auto ref = AllExpertsReference(moe, flat, GateByHand(moe, flat, c).gates).view(x.sizes());
  ((ref - target).pow(2)).sum().backward();
  EXPECT_TRUE(torch::allclose(got.out, ref, 1e-4, 1e-5)) << (got.out - ref).abs().max();
  auto params = moe->parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    ASSERT_TRUE(params[i].grad().defined());
    EXPECT_TRUE(torch::allclose(grads[i], params[i].grad(), 1e-4, 1e-5)) << "param " << i;
  }
  EXPECT_EQ(got.tokens_per_expert.sum().item<int64_t>(), 10 * c.top_k);
  EXPECT_FALSE(moe->expert_bias.requires_grad());
}

INSTANTIATE_TEST_SUITE_P(ScoreFuncs, MoEVsDenseTest, ::testing::Values("sigmoid", "softmax"));

TEST(MoERoutingTest, TokensPerExpertMatchHandRouting) {
  ModelConfig c = SmallMoEConfig("sigmoid");
  c.dim = 4;
  MoE moe(c);
  torch::NoGradGuard g;
  SetOneHotRouter(moe);
  // Tokens: one-hot 0, one-hot 0, one-hot 2, and a token preferring 3 then 1.
  auto x = torch::tensor({{1.f, 0.f, 0.f, 0.5f}, {1.f, 0.f, 0.2f, 0.f}, {0.f, 0.f, 1.f, 0.3f}, {0.f, 0.5f, 0.f, 1.f}});
  // Top-2 per token: {0,3}, {0,2}, {2,3}, {3,1} -> counts [2, 1, 2, 3].
  auto out = moe(x);
  auto counts = out.tokens_per_expert;
  std::vector<int64_t> got(counts.data_ptr<int64_t>(), counts.data_ptr<int64_t>() + 4);
  EXPECT_EQ(got, (std::vector<int64_t>{2, 1, 2, 3}));
  // The bias steers selection: a huge bias on expert 1 puts it in every token's top-2.
  moe->expert_bias.copy_(torch::tensor({0.f, 10.f, 0.f, 0.f}));
  counts = moe(x).tokens_per_expert;
  EXPECT_EQ(counts[1].item<int64_t>(), 4);
}

TEST(MoEBiasTest, UpdateMovesTowardsUnderloadedExpertsAndRecentres) {
  MoE moe(SmallMoEConfig("sigmoid"));
  moe->UpdateExpertBias(torch::tensor({10, 2, 6, 6}), 0.01);
  // mean 6: signs (-1, +1, 0, 0) * 0.01, already mean zero.
  auto b = moe->expert_bias;
  EXPECT_NEAR(b[0].item<float>(), -0.01, 1e-7);
  EXPECT_NEAR(b[1].item<float>(), 0.01, 1e-7);
  EXPECT_NEAR(b[2].item<float>(), 0.0, 1e-7);
  moe->UpdateExpertBias(torch::tensor({1, 1, 1, 5}), 0.01);
  EXPECT_NEAR(b.sum().item<float>(), 0.0, 1e-6);
  // [-0.01, 0.01, 0, 0] + 0.01·[1, 1, 1, -1] = [0, 0.02, 0.01, -0.01]; mean 0.005.
  EXPECT_NEAR(b[3].item<float>(), -0.015, 1e-6);
  EXPECT_NEAR(b[1].item<float>(), 0.015, 1e-6);
}

}  // namespace
}  // namespace trainyard::engine
