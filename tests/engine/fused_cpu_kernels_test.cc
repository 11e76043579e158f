// The fused CPU kernels against dense float64 references built from plain ops: full
// t×t scores with an explicit causal mask, K/V heads repeated per query head, RoPE from
// RotaryEmbedding::Rotate (checked against complex rotation in
// attention_numerics_test). Forward values and the gradients of a random projection of
// the output are compared, over shapes that leave a partial last query block.
#include <cmath>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "worker/engine/fused_cpu_kernels.h"
#include "worker/engine/rotary_embedding.h"

namespace trainyard::engine {
namespace {

using torch::Tensor;

Tensor ReferenceAttention(const Tensor& qkv, const Tensor& cos, const Tensor& sin, int64_t nh, int64_t nkv,
                          int64_t hd) {
  const int64_t b = qkv.size(0), t = qkv.size(1), rep = nh / nkv;
  auto q = qkv.narrow(-1, 0, nh * hd).reshape({b, t, nh, hd});
  auto k = qkv.narrow(-1, nh * hd, nkv * hd).reshape({b, t, nkv, hd});
  auto v = qkv.narrow(-1, (nh + nkv) * hd, nkv * hd).reshape({b, t, nkv, hd});
  q = RotaryEmbedding::Rotate(q, cos, sin);
  k = RotaryEmbedding::Rotate(k, cos, sin).repeat_interleave(rep, 2);
  v = v.repeat_interleave(rep, 2);
  auto scores = torch::einsum("bqhd,bkhd->bhqk", {q, k}) / std::sqrt(static_cast<double>(hd));
  auto future = torch::ones({t, t}, torch::kBool).triu(1);
  auto probs = torch::softmax(scores.masked_fill(future, -std::numeric_limits<double>::infinity()), -1);
  return torch::einsum("bhqk,bkhd->bqhd", {probs, v}).reshape({b, t, nh * hd});
}

struct AttentionCase {
  int64_t b, t, nh, nkv, hd, qb;
};

class FusedAttentionTest : public ::testing::TestWithParam<AttentionCase> {};

TEST_P(FusedAttentionTest, MatchesDenseReferenceForwardAndBackward) {
  const AttentionCase c = GetParam();
  torch::manual_seed(7);
  RotaryEmbedding rope(c.hd, c.t, 10000.0);
  const Tensor cos = rope.CosTable(c.t), sin = rope.SinTable(c.t);
  const Tensor qkv = torch::randn({c.b, c.t, (c.nh + 2 * c.nkv) * c.hd});
  const Tensor proj = torch::randn({c.b, c.t, c.nh * c.hd});

  ASSERT_TRUE(fused::Applies(qkv));
  const Tensor x = qkv.clone().requires_grad_(true);
  const Tensor out = fused::CausalAttention(x, cos, sin, c.nh, c.nkv, c.hd, c.qb);
  (out * proj).sum().backward();

  const Tensor x64 = qkv.to(torch::kFloat64).requires_grad_(true);
  const Tensor ref = ReferenceAttention(x64, cos.to(torch::kFloat64), sin.to(torch::kFloat64), c.nh, c.nkv, c.hd);
  (ref * proj.to(torch::kFloat64)).sum().backward();

  EXPECT_LT((out.to(torch::kFloat64) - ref).abs().max().item<double>(), 2e-5);
  const double grad_scale = x64.grad().abs().max().item<double>();
  EXPECT_LT((x.grad().to(torch::kFloat64) - x64.grad()).abs().max().item<double>(), 2e-5 * grad_scale);
}

INSTANTIATE_TEST_SUITE_P(Shapes, FusedAttentionTest,
                         ::testing::Values(AttentionCase{2, 100, 4, 2, 8, 32},   // partial last block
                                           AttentionCase{1, 64, 2, 2, 4, 64},    // one block, rep 1
                                           AttentionCase{2, 70, 6, 2, 8, 16},    // rep 3, 5 blocks
                                           AttentionCase{1, 5, 4, 1, 2, 64}));   // shorter than a block

TEST(FusedRmsNormTest, MatchesFloat64ReferenceForwardAndBackward) {
  torch::manual_seed(3);
  const Tensor x0 = torch::randn({3, 37, 24}) * 3;
  const Tensor w0 = torch::rand({24}) + 0.5;
  const Tensor proj = torch::randn({3, 37, 24});
  const double eps = 1e-5;

  const Tensor x = x0.clone().requires_grad_(true), w = w0.clone().requires_grad_(true);
  ASSERT_TRUE(fused::Applies(x));
  const Tensor y = fused::RmsNorm(x, w, eps);
  (y * proj).sum().backward();

  const Tensor x64 = x0.to(torch::kFloat64).requires_grad_(true), w64 = w0.to(torch::kFloat64).requires_grad_(true);
  const Tensor ref = x64 * torch::rsqrt(x64.pow(2).mean(-1, true) + eps) * w64;
  (ref * proj.to(torch::kFloat64)).sum().backward();

  EXPECT_LT((y.to(torch::kFloat64) - ref).abs().max().item<double>(), 1e-5);
  EXPECT_LT((x.grad().to(torch::kFloat64) - x64.grad()).abs().max().item<double>(), 1e-5);
  EXPECT_LT((w.grad().to(torch::kFloat64) - w64.grad()).abs().max().item<double>(), 1e-4);
}

TEST(FusedSwiGluTest, MatchesFloat64ReferenceForwardAndBackward) {
  torch::manual_seed(5);
  const Tensor h0 = torch::randn({2, 19, 2 * 12}) * 4;  // reaches both tails of the sigmoid
  const Tensor proj = torch::randn({2, 19, 12});

  const Tensor h = h0.clone().requires_grad_(true);
  ASSERT_TRUE(fused::Applies(h));
  const Tensor y = fused::SwiGlu(h);
  (y * proj).sum().backward();

  const Tensor h64 = h0.to(torch::kFloat64).requires_grad_(true);
  const Tensor a = h64.narrow(-1, 0, 12), b = h64.narrow(-1, 12, 12);
  const Tensor ref = a / (1 + torch::exp(-a)) * b;
  (ref * proj.to(torch::kFloat64)).sum().backward();

  EXPECT_LT((y.to(torch::kFloat64) - ref).abs().max().item<double>(), 1e-5 * ref.abs().max().item<double>());
  EXPECT_LT((h.grad().to(torch::kFloat64) - h64.grad()).abs().max().item<double>(),
            1e-5 * h64.grad().abs().max().item<double>());
}

TEST(FusedKernelsTest, ApplyOnlyToFloat32CpuTensors) {
  EXPECT_TRUE(fused::Applies(torch::zeros({2, 2})));
  EXPECT_FALSE(fused::Applies(torch::zeros({2, 2}, torch::kFloat64)));
}

}  // namespace
}  // namespace trainyard::engine
