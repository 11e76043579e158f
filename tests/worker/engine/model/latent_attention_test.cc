// deepseek_v3's pieces against references written another way: YaRN's frequencies from
// scalar loops, latent attention as per-head loops in double (forward and gradients),
// and group-limited routing on hand-made scores.
#include "worker/engine/model/layers/latent_attention.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <limits>
#include <vector>

#include "common/spec/presets.h"
#include "worker/engine/model/layers/rotary_embedding.h"
#include "worker/engine/model/moe/moe_router.h"

namespace trainyard::engine {
namespace {

TEST(YarnTest, FrequenciesBlendByTheRampOfTheCorrectionRange) {
  const int64_t dim = 16;
  const double theta = 10000.0;
  const YarnScaling yarn{4.0, 128, 32.0, 1.0};
  // The range from its definition: the dimension index at which a wavelength turns
  // `r` times over 128 positions, floored (fast) and ceiled (slow), clipped to the dims.
  auto at = [&](double r) { return dim * std::log(128.0 / (r * 2 * M_PI)) / (2 * std::log(theta)); };
  const double low = std::max(0.0, std::floor(at(32.0))), high = std::min(double(dim - 1), std::ceil(at(1.0)));
  ASSERT_LT(low, high) << "the case needs a ramp with both ends inside the dims";
  const auto got = RotaryEmbedding::InverseFrequencies(dim, theta, yarn);
  ASSERT_EQ(got.numel(), dim / 2);
  int interpolated = 0, kept = 0;
  for (int64_t i = 0; i < dim / 2; ++i) {
    const double base = std::pow(theta, -2.0 * i / dim);
    double ramp = (i - low) / (high - low);
    ramp = ramp < 0 ? 0 : (ramp > 1 ? 1 : ramp);
    interpolated += ramp == 1;
    kept += ramp == 0;
    EXPECT_NEAR(got[i].item<double>(), base * (1 - ramp) + base / 4.0 * ramp, 1e-15) << "i=" << i;
  }
  EXPECT_GT(interpolated, 0);
  EXPECT_GT(kept, 0);
  // factor 1: plain RoPE.
  const auto plain = RotaryEmbedding::InverseFrequencies(dim, theta, YarnScaling{1.0, 128, 32.0, 1.0});
  for (int64_t i = 0; i < dim / 2; ++i) EXPECT_DOUBLE_EQ(plain[i].item<double>(), std::pow(theta, -2.0 * i / dim));
}

spec::ModelSpec LatentConfig(int q_lora_rank) {
  auto spec = spec::FromPreset("deepseek_v3_debug");
  EXPECT_TRUE(spec.ok());
  spec::ModelSpec m = spec.value().model;
  m.dim = 32;
  m.n_heads = 4;
  m.n_kv_heads = 4;
  m.q_lora_rank = q_lora_rank;
  m.kv_lora_rank = 12;
  m.qk_nope_head_dim = 6;
  m.qk_rope_head_dim = 4;
  m.v_head_dim = 5;
  return m;
}

torch::Tensor RmsNormD(const torch::Tensor& x, const torch::Tensor& w, double eps) {
  return x * torch::rsqrt(x.pow(2).mean(-1, true) + eps) * w;
}

// Rotates consecutive pairs of x [t, d] by position·freq, one pair at a time.
torch::Tensor RotatePairs(const torch::Tensor& x, const torch::Tensor& freqs) {
  std::vector<torch::Tensor> rows;
  for (int64_t pos = 0; pos < x.size(0); ++pos) {
    std::vector<torch::Tensor> pairs;
    for (int64_t i = 0; i < x.size(1) / 2; ++i) {
      const double a = pos * freqs[i].item<double>();
      auto x0 = x[pos][2 * i], x1 = x[pos][2 * i + 1];
      pairs.push_back(x0 * std::cos(a) - x1 * std::sin(a));
      pairs.push_back(x1 * std::cos(a) + x0 * std::sin(a));
    }
    rows.push_back(torch::stack(pairs));
  }
  return torch::stack(rows);
}

// Latent attention of one sequence x [t, dim] in double, head by head, position by
// position: the definition the region must compute.
torch::Tensor LoopLatentAttention(const spec::ModelSpec& c, const torch::Tensor& x,
                                  const std::vector<torch::Tensor>& p) {
  const int64_t t = x.size(0), nope = c.qk_nope_head_dim, rope = c.qk_rope_head_dim, vd = c.v_head_dim;
  const auto freqs = RotaryEmbedding::InverseFrequencies(
      rope, c.rope_theta, YarnScaling{c.rope_factor, c.original_seq_len, c.beta_fast, c.beta_slow});
  size_t i = 0;
  torch::Tensor q;
  if (c.q_lora_rank > 0) {
    q = torch::matmul(RmsNormD(torch::matmul(x, p[0].t()), p[1], c.norm_eps), p[2].t());
    i = 3;
  } else {
    q = torch::matmul(x, p[0].t());
    i = 1;
  }
  auto kv = torch::matmul(x, p[i].t());
  auto k_pe = RotatePairs(kv.narrow(1, c.kv_lora_rank, rope), freqs);
  auto kvh = torch::matmul(RmsNormD(kv.narrow(1, 0, c.kv_lora_rank), p[i + 1], c.norm_eps), p[i + 2].t());
  const double scale = regions::LatentAttentionScale(c);
  std::vector<torch::Tensor> heads;
  for (int64_t h = 0; h < c.n_heads; ++h) {
    auto qh = q.narrow(1, h * (nope + rope), nope + rope);
    auto q_full = torch::cat({qh.narrow(1, 0, nope), RotatePairs(qh.narrow(1, nope, rope), freqs)}, 1);
    auto kh = kvh.narrow(1, h * (nope + vd), nope + vd);
    auto k_full = torch::cat({kh.narrow(1, 0, nope), k_pe}, 1);
    auto v = kh.narrow(1, nope, vd);
    std::vector<torch::Tensor> rows;
    for (int64_t pos = 0; pos < t; ++pos) {
      auto scores = torch::matmul(k_full.narrow(0, 0, pos + 1), q_full[pos]) * scale;
      rows.push_back(torch::matmul(torch::softmax(scores, 0), v.narrow(0, 0, pos + 1)));
    }
    heads.push_back(torch::stack(rows));
  }
  return torch::matmul(torch::cat(heads, 1), p[i + 3].t());
}

void ExpectLatentAttentionMatchesLoops(int q_lora_rank) {
  const spec::ModelSpec c = LatentConfig(q_lora_rank);
  torch::manual_seed(3);
  LatentAttention attention(c);
  for (auto& w : attention->parameters()) {
    torch::NoGradGuard g;
    w.uniform_(-0.4, 0.4);
  }
  const int64_t b = 2, t = 9;
  RotaryEmbedding rope(c.rope_head_dim(), t, c.rope_theta,
                       YarnScaling{c.rope_factor, c.original_seq_len, c.beta_fast, c.beta_slow});
  auto x = torch::randn({b, t, c.dim}).requires_grad_(true);
  auto y = attention(x, rope);
  ASSERT_EQ(y.sizes(), (std::vector<int64_t>{b, t, c.dim}));
  auto upstream = torch::randn_like(y);
  (y * upstream).sum().backward();

  std::vector<torch::Tensor> pd;
  for (const auto& w : attention->Params()) pd.push_back(w.detach().to(torch::kDouble).requires_grad_(true));
  auto xd = x.detach().to(torch::kDouble).requires_grad_(true);
  std::vector<torch::Tensor> outs;
  for (int64_t s = 0; s < b; ++s) outs.push_back(LoopLatentAttention(c, xd[s], pd));
  auto yd = torch::stack(outs);
  (yd * upstream.to(torch::kDouble)).sum().backward();

  EXPECT_LT((y.to(torch::kDouble) - yd).abs().max().item<double>(), 1e-5);
  EXPECT_LT((x.grad().to(torch::kDouble) - xd.grad()).abs().max().item<double>(), 1e-5);
  const auto params = attention->Params();
  for (size_t i = 0; i < params.size(); ++i) {
    EXPECT_LT((params[i].grad().to(torch::kDouble) - pd[i].grad()).abs().max().item<double>(), 1e-5) << "param " << i;
  }
}

TEST(LatentAttentionTest, LowRankQueryMatchesPerHeadLoopsWithGradients) { ExpectLatentAttentionMatchesLoops(10); }

TEST(LatentAttentionTest, PlainQueryMatchesPerHeadLoopsWithGradients) { ExpectLatentAttentionMatchesLoops(0); }

TEST(LatentAttentionTest, YarnScalesTheSoftmaxByMscaleSquared) {
  spec::ModelSpec c = LatentConfig(0);
  c.rope_factor = 40;
  c.mscale = 0.707;
  const double m = 0.1 * 0.707 * std::log(40.0) + 1;
  EXPECT_DOUBLE_EQ(regions::LatentAttentionScale(c), m * m / std::sqrt(10.0));
  c.rope_factor = 1;
  EXPECT_DOUBLE_EQ(regions::LatentAttentionScale(c), 1 / std::sqrt(10.0));
}

TEST(GroupLimitedRoutingTest, ExpertsOutsideTheBestGroupsAreNeverChosen) {
  // 8 experts in 4 groups of 2; group score = the sum of its two experts.
  auto choice = torch::tensor({{0.85, 0.0, 0.5, 0.4, 0.2, 0.2, 0.3, 0.8},     // groups .85 0.9 0.4 1.1
                               {0.1, 0.1, 0.95, 0.0, 0.6, 0.55, 0.0, 0.0}});  // groups 0.2 .95 1.15 0
  auto limited = regions::LimitToBestGroups(choice, 4, 2);
  const double inf = std::numeric_limits<double>::infinity();
  auto want =
      torch::tensor({{-inf, -inf, 0.5, 0.4, -inf, -inf, 0.3, 0.8}, {-inf, -inf, 0.95, 0.0, 0.6, 0.55, -inf, -inf}});
  EXPECT_TRUE(torch::equal(limited, want)) << limited;
  // Expert 0 (the best single score of row 0) lies in a losing group: top-2 skips it.
  auto picked = std::get<1>(limited.topk(2, -1));
  EXPECT_TRUE(torch::equal(std::get<0>(picked.sort(-1)), torch::tensor({{2, 7}, {2, 4}}).to(torch::kLong))) << picked;
  EXPECT_TRUE(torch::equal(regions::LimitToBestGroups(choice, 1, 1), choice));
}

}  // namespace
}  // namespace trainyard::engine
