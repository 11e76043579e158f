// RMSNorm, RoPE and attention against references written a different way: explicit
// loops, std::complex rotation, per-head softmax over the causal prefix.
#include <cmath>
#include <complex>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "worker/engine/model/layers/attention_layer.h"
#include "worker/engine/model/layers/rms_norm.h"
#include "worker/engine/model/layers/rotary_embedding.h"

namespace trainyard::engine {
namespace {

TEST(RMSNormTest, MatchesLoopReference) {
  torch::manual_seed(0);
  RMSNorm norm(8, 1e-5);
  {
    torch::NoGradGuard g;
    norm->weight.uniform_(0.5, 1.5);
  }
  auto x = torch::randn({3, 8});
  auto y = norm(x);
  auto xa = x.accessor<float, 2>();
  auto wa = norm->weight.accessor<float, 1>();
  for (int r = 0; r < 3; ++r) {
    double ss = 0;
    for (int i = 0; i < 8; ++i) ss += double(xa[r][i]) * xa[r][i];
    const double inv = 1.0 / std::sqrt(ss / 8 + 1e-5);
    for (int i = 0; i < 8; ++i) EXPECT_NEAR(y[r][i].item<float>(), xa[r][i] * inv * wa[i], 1e-5);
  }
}

TEST(RotaryEmbeddingTest, MatchesComplexRotationOfConsecutivePairs) {
  const int64_t b = 2, t = 5, h = 3, hd = 8;
  const double theta = 10000.0;
  RotaryEmbedding rope(hd, 16, theta);
  torch::manual_seed(1);
  auto x = torch::randn({b, t, h, hd});
  auto y = rope.Apply(x);
  for (int64_t bi = 0; bi < b; ++bi)
    for (int64_t pos = 0; pos < t; ++pos)
      for (int64_t hi = 0; hi < h; ++hi)
        for (int64_t i = 0; i < hd / 2; ++i) {
          const double freq = std::pow(theta, -2.0 * i / hd);
          std::complex<double> z(x[bi][pos][hi][2 * i].item<float>(), x[bi][pos][hi][2 * i + 1].item<float>());
          auto r = z * std::polar(1.0, pos * freq);
          EXPECT_NEAR(y[bi][pos][hi][2 * i].item<float>(), r.real(), 1e-5);
          EXPECT_NEAR(y[bi][pos][hi][2 * i + 1].item<float>(), r.imag(), 1e-5);
        }
}

TEST(AttentionTest, GqaCausalMatchesPerHeadLoops) {
  const int64_t b = 2, t = 6, dim = 16, n_heads = 4, n_kv = 2, hd = dim / n_heads;
  torch::manual_seed(2);
  Attention attn(dim, n_heads, n_kv);
  RotaryEmbedding rope(hd, t, 10000.0);
  auto x = torch::randn({b, t, dim});
  auto y = attn(x, rope);

  torch::NoGradGuard g;
  auto q = rope.Apply(torch::matmul(x, attn->wq->weight.t()).view({b, t, n_heads, hd}));
  auto k = rope.Apply(torch::matmul(x, attn->wk->weight.t()).view({b, t, n_kv, hd}));
  auto v = torch::matmul(x, attn->wv->weight.t()).view({b, t, n_kv, hd});
  auto heads = torch::zeros({b, t, n_heads, hd});
  for (int64_t bi = 0; bi < b; ++bi)
    for (int64_t h = 0; h < n_heads; ++h) {
      const int64_t kvh = h / (n_heads / n_kv);
      for (int64_t i = 0; i < t; ++i) {
        std::vector<double> s(i + 1);
        double mx = -1e30;
        for (int64_t j = 0; j <= i; ++j) {
          s[j] = (q[bi][i][h] * k[bi][j][kvh]).sum().item<double>() / std::sqrt(double(hd));
          mx = std::max(mx, s[j]);
        }
        double z = 0;
        for (auto& e : s) z += (e = std::exp(e - mx));
        auto acc = torch::zeros({hd});
        for (int64_t j = 0; j <= i; ++j) acc += v[bi][j][kvh] * (s[j] / z);
        heads[bi][i][h] = acc;
      }
    }
  auto ref = torch::matmul(heads.view({b, t, dim}), attn->wo->weight.t());
  EXPECT_TRUE(torch::allclose(y, ref, 1e-4, 1e-5)) << (y - ref).abs().max();
}

}  // namespace
}  // namespace trainyard::engine
