// RMSNorm, RoPE and attention against references written a different way: explicit
// loops, std::complex rotation, per-head softmax over the causal prefix. Attention runs
// both of its paths: the fused CPU kernel and LibTorch's scaled_dot_product_attention
// (what bf16 and CUDA run), which must also agree with each other, gradients included.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <complex>
#include <vector>

#include "worker/engine/kernels/cpu/fused_cpu_kernels.h"
#include "worker/engine/kernels/ops.h"
#include "worker/engine/kernels/reference_ops.h"
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

// Switches the fused attention for one scope (the SDPA path runs where it is off).
class FusedAttention {
 public:
  explicit FusedAttention(bool on) { fused::SetAttentionEnabled(on); }
  ~FusedAttention() { fused::SetAttentionEnabled(true); }
};

class AttentionPathTest : public ::testing::TestWithParam<bool> {};

// GQA on the fused kernel or SDPA against per-head loops; with `qk_norm` (qwen3_moe)
// on heads of 6 (not dim / n_heads = 4), each query and key head RMS-normalised first.
void ExpectGqaMatchesPerHeadLoops(bool qk_norm) {
  const int64_t b = 2, t = 6, dim = 16, n_heads = 4, n_kv = 2, hd = qk_norm ? 6 : dim / n_heads;
  spec::ModelSpec m;
  m.dim = dim;
  m.n_heads = n_heads;
  m.n_kv_heads = n_kv;
  m.norm_eps = 1e-6;
  if (qk_norm) {
    m.architecture = "qwen3_moe";
    m.head_dim_override = hd;
  }
  torch::manual_seed(2);
  Attention attn(m);
  if (qk_norm) {
    torch::NoGradGuard g;
    attn->q_norm->weight.uniform_(0.5, 1.5);
    attn->k_norm->weight.uniform_(0.5, 1.5);
  }
  RotaryEmbedding rope(hd, t, 10000.0);
  auto x = torch::randn({b, t, dim});
  auto y = attn(x, rope);

  torch::NoGradGuard g;
  auto head_norm = [&](const torch::Tensor& h, const RMSNorm& norm) {
    if (!qk_norm) return h;
    return h * torch::rsqrt(h.pow(2).mean(-1, true) + 1e-6) * norm->weight;
  };
  auto q = rope.Apply(head_norm(torch::matmul(x, attn->wq->weight.t()).view({b, t, n_heads, hd}), attn->q_norm));
  auto k = rope.Apply(head_norm(torch::matmul(x, attn->wk->weight.t()).view({b, t, n_kv, hd}), attn->k_norm));
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
  auto ref = torch::matmul(heads.view({b, t, n_heads * hd}), attn->wo->weight.t());
  EXPECT_TRUE(torch::allclose(y, ref, 1e-4, 1e-5)) << (y - ref).abs().max();
}

TEST_P(AttentionPathTest, GqaCausalMatchesPerHeadLoops) {
  FusedAttention path(GetParam());
  ExpectGqaMatchesPerHeadLoops(false);
}

TEST_P(AttentionPathTest, QwenQkNormOnWideHeadsMatchesPerHeadLoops) {
  FusedAttention path(GetParam());
  ExpectGqaMatchesPerHeadLoops(true);
}

INSTANTIATE_TEST_SUITE_P(FusedAndSdpa, AttentionPathTest, ::testing::Values(true, false),
                         [](const auto& info) { return info.param ? "Fused" : "Sdpa"; });

struct SdpaCase {
  int64_t b, t, n_heads, n_kv, hd;
};

class SdpaAgainstFusedTest : public ::testing::TestWithParam<SdpaCase> {};

// The region's output and the gradients of x and of all four weights, through a random
// projection of the output, equal on both paths to fp32 rounding (1e-5 of their scale).
TEST_P(SdpaAgainstFusedTest, OutputsAndGradientsAgree) {
  const SdpaCase c = GetParam();
  const int64_t dim = c.n_heads * c.hd;
  torch::manual_seed(11);
  RotaryEmbedding rope(c.hd, c.t, 10000.0);
  const auto x0 = torch::randn({c.b, c.t, dim});
  const auto proj = torch::randn({c.b, c.t, dim});
  const std::vector<torch::Tensor> w0 = {
      torch::randn({c.n_heads * c.hd, dim}) * 0.3, torch::randn({c.n_kv * c.hd, dim}) * 0.3,
      torch::randn({c.n_kv * c.hd, dim}) * 0.3, torch::randn({dim, c.n_heads * c.hd}) * 0.3};
  const auto fn = regions::Attention(c.n_heads, c.n_kv, c.hd, AttentionImpl::kQueryBlock);
  auto run = [&](bool fused_on) {
    FusedAttention path(fused_on);
    auto x = x0.clone().requires_grad_(true);
    std::vector<torch::Tensor> w;
    for (const auto& p : w0) w.push_back(p.clone().requires_grad_(true));
    auto out = fn({x, rope.CosTable(c.t), rope.SinTable(c.t)}, w)[0];
    (out * proj).sum().backward();
    std::vector<torch::Tensor> r{out.detach(), x.grad()};
    for (const auto& p : w) r.push_back(p.grad());
    return r;
  };
  ASSERT_TRUE(fused::Applies(x0)) << "the fused kernels must be available to compare against";
  const auto fused_r = run(true), sdpa_r = run(false);
  const char* names[] = {"output", "x.grad", "wq.grad", "wk.grad", "wv.grad", "wo.grad"};
  for (size_t i = 0; i < fused_r.size(); ++i) {
    const double scale = fused_r[i].abs().max().item<double>();
    EXPECT_LT((sdpa_r[i] - fused_r[i]).abs().max().item<double>(), 1e-5 * scale) << names[i];
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, SdpaAgainstFusedTest,
                         ::testing::Values(SdpaCase{2, 100, 4, 2, 8},  // partial last query block
                                           SdpaCase{1, 64, 2, 2, 4},   // one block, no GQA
                                           SdpaCase{2, 70, 6, 2, 8},   // 3 query heads per KV head
                                           SdpaCase{1, 5, 4, 1, 2}));  // shorter than a block

// bf16 activations on CPU run the fused fp32 kernel on the upcast q|k|v: the operator's
// output is that kernel's output rounded to bf16, bit for bit, and its q|k|v gradient
// the kernel's gradient of the bf16 output gradient, rounded. Both stay within bf16
// rounding of LibTorch's bf16 SDPA path, which the fused attention switched off runs.
TEST(Bf16AttentionTest, RunsTheFusedKernelOnTheUpcastProjection) {
  const int64_t b = 2, t = 70, n_heads = 6, n_kv = 2, hd = 8;
  torch::manual_seed(17);
  RotaryEmbedding rope(hd, t, 10000.0);
  const auto cos = rope.CosTable(t), sin = rope.SinTable(t);
  const auto qkv0 = torch::randn({b, t, (n_heads + 2 * n_kv) * hd}).to(torch::kBFloat16);
  const auto proj = torch::randn({b, t, n_heads * hd}).to(torch::kBFloat16);
  auto run = [&](const torch::Tensor& in) {
    auto qkv = in.clone().requires_grad_(true);
    auto out = ops::CausalAttention(qkv, cos, sin, n_heads, n_kv, hd, AttentionImpl::kQueryBlock);
    (out * proj.to(out.scalar_type())).sum().backward();
    return std::vector<torch::Tensor>{out.detach(), qkv.grad()};
  };
  ASSERT_TRUE(fused::BFloat16AttentionApplies(qkv0));
  const auto bf16 = run(qkv0), fp32 = run(qkv0.to(torch::kFloat));
  ASSERT_EQ(bf16[0].scalar_type(), torch::kBFloat16);
  ASSERT_EQ(bf16[1].scalar_type(), torch::kBFloat16);
  EXPECT_TRUE(torch::equal(bf16[0], fp32[0].to(torch::kBFloat16))) << "the output is the fp32 kernel's, rounded";
  // The bf16 output's gradient is the projection in bf16 (exact in fp32 as well), so the
  // kernel's backward sees the same values in both runs.
  EXPECT_TRUE(torch::equal(bf16[1], fp32[1].to(torch::kBFloat16))) << "the gradient is the fp32 kernel's, rounded";

  std::vector<torch::Tensor> sdpa;
  {
    FusedAttention path(false);
    EXPECT_FALSE(fused::BFloat16AttentionApplies(qkv0)) << "the switch sends bf16 to SDPA";
    sdpa = run(qkv0);
  }
  const char* names[] = {"output", "qkv.grad"};
  for (size_t i = 0; i < sdpa.size(); ++i) {
    const auto a = bf16[i].to(torch::kFloat), r = sdpa[i].to(torch::kFloat);
    // bf16 keeps 8 significant bits: a few roundings of 2^-8 of the tensor's scale.
    EXPECT_LT((a - r).abs().max().item<double>(), 2e-2 * r.abs().max().item<double>()) << names[i];
  }
}

// CUDA fp32 repeats K and V per query head instead of enable_gqa (its kernels take no
// fp32 GQA); the repeat must pair heads exactly as enable_gqa does, gradients included
// (summed back over the repeats). Checked on CPU, where both forms run.
TEST(CausalSdpaTest, RepeatedKvEqualsTheGqaPairing) {
  for (int64_t rep : {2, 3}) {
    torch::manual_seed(13);
    const int64_t b = 2, kv = 2, h = kv * rep, t = 37, hd = 8;
    const auto q0 = torch::randn({b, h, t, hd}), k0 = torch::randn({b, kv, t, hd}), v0 = torch::randn({b, kv, t, hd});
    const auto proj = torch::randn({b, h, t, hd});
    auto run = [&](bool expand) {
      auto q = q0.clone().requires_grad_(true), k = k0.clone().requires_grad_(true),
           v = v0.clone().requires_grad_(true);
      auto out = reference::CausalSdpa(q, k, v, expand);
      (out * proj).sum().backward();
      return std::vector<torch::Tensor>{out.detach(), q.grad(), k.grad(), v.grad()};
    };
    const auto gqa = run(false), repeated = run(true);
    const char* names[] = {"output", "q.grad", "k.grad", "v.grad"};
    for (size_t i = 0; i < gqa.size(); ++i) {
      const double scale = gqa[i].abs().max().item<double>();
      EXPECT_LT((repeated[i] - gqa[i]).abs().max().item<double>(), 1e-6 * scale) << names[i] << " rep " << rep;
    }
  }
  EXPECT_FALSE(reference::SdpaExpandsKv(torch::zeros({1}), 4, 2)) << "CPU keeps enable_gqa";
  EXPECT_FALSE(reference::SdpaExpandsKv(torch::zeros({1}), 4, 4)) << "no GQA, nothing to repeat";
}

}  // namespace
}  // namespace trainyard::engine
