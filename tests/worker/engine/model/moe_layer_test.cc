// The sorted/grouped MoE against a dense reference that runs every expert on every
// token and masks by the gates; routing counts against a hand-built routing.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "worker/engine/config/engine_config.h"
#include "worker/engine/model/moe/moe_layer.h"

namespace trainyard::engine {
namespace {

ModelConfig SmallMoE(const std::string& score_func) {
  ModelConfig c = TinyEngineConfig().model;
  c.dim = 8;
  c.n_routed_experts = 4;
  c.top_k = 2;
  c.expert_hidden = 6;
  c.n_shared_experts = 1;
  c.score_func = score_func;
  c.route_scale = 1.5;
  return c;
}

void RandomInit(MoE& moe, int seed) {
  torch::manual_seed(seed);
  torch::NoGradGuard g;
  for (auto& p : moe->parameters()) p.normal_(0, 0.5);
  moe->expert_bias.copy_(torch::tensor({0.3f, -0.2f, 0.0f, 0.1f}));
}

// Every expert on every token; a [tokens, E] gate matrix that is zero off the top-k.
torch::Tensor DenseReference(MoE& moe, const torch::Tensor& x, const ModelConfig& c) {
  auto logits = torch::matmul(x, moe->router->gate->weight.t());
  auto scores = c.score_func == "softmax" ? torch::softmax(logits, -1) : torch::sigmoid(logits);
  const int64_t n = x.size(0), e_count = c.n_routed_experts;
  auto biased = (scores + moe->expert_bias).detach();
  auto mask = torch::zeros({n, e_count});
  for (int64_t t = 0; t < n; ++t) {
    // Pick top-k by repeated argmax (a different algorithm from torch::topk).
    auto row = biased[t].clone();
    for (int k = 0; k < c.top_k; ++k) {
      const int64_t best = row.argmax().item<int64_t>();
      mask[t][best] = 1;
      row[best] = -1e9;
    }
  }
  auto gates = scores * mask;
  if (c.route_norm) gates = gates / gates.sum(-1, true);
  gates = gates * c.route_scale;
  auto out = torch::zeros_like(x);
  for (int64_t e = 0; e < e_count; ++e) {
    auto w1 = moe->experts->w1[e], w2 = moe->experts->w2[e], w3 = moe->experts->w3[e];
    auto y = torch::matmul(torch::silu(torch::matmul(x, w1.t())) * torch::matmul(x, w3.t()), w2.t());
    out = out + y * gates.select(1, e).unsqueeze(1);
  }
  auto sh = moe->shared_experts;
  return out + sh->w2(torch::silu(sh->w1(x)) * sh->w3(x));
}

class MoEVsDenseTest : public ::testing::TestWithParam<std::string> {};

TEST_P(MoEVsDenseTest, OutputAndGradientsMatch) {
  const ModelConfig c = SmallMoE(GetParam());
  MoE moe(c);
  RandomInit(moe, 3);
  auto x = torch::randn({2, 5, c.dim});
  auto target = torch::randn({2, 5, c.dim});

  MoEOutput got = moe(x);
  ((got.out - target).pow(2)).sum().backward();
  std::vector<torch::Tensor> grads;
  for (auto& p : moe->parameters()) grads.push_back(p.grad().clone());
  moe->zero_grad();

  auto ref = DenseReference(moe, x.reshape({-1, c.dim}), c).view(x.sizes());
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
  ModelConfig c = SmallMoE("sigmoid");
  c.dim = 4;
  MoE moe(c);
  torch::NoGradGuard g;
  // gate row e picks feature e: a one-hot token j scores highest on expert j.
  moe->router->gate->weight.copy_(torch::eye(4) * 4.0);
  moe->expert_bias.zero_();
  // Tokens: one-hot 0, one-hot 0, one-hot 2, and a token preferring 3 then 1.
  auto x = torch::tensor({{1.f, 0.f, 0.f, 0.5f}, {1.f, 0.f, 0.2f, 0.f}, {0.f, 0.f, 1.f, 0.3f},
                          {0.f, 0.5f, 0.f, 1.f}});
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
  MoE moe(SmallMoE("sigmoid"));
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
