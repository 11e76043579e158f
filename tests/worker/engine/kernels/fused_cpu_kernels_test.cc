// The fused CPU kernels against dense float64 references built from plain ops: full
// t×t scores with an explicit causal mask, K/V heads repeated per query head, RoPE from
// RotaryEmbedding::Rotate (checked against complex rotation in
// attention_numerics_test). Forward values and the gradients of a random projection of
// the output are compared, over shapes that leave a partial last query block.
#include "worker/engine/kernels/cpu/fused_cpu_kernels.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>

#include "worker/engine/kernels/cpu/cpu_blas.h"
#include "worker/engine/kernels/ops.h"
#include "worker/engine/model/layers/rotary_embedding.h"

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
  const Tensor out = ops::CausalAttention(x, cos, sin, c.nh, c.nkv, c.hd, c.qb);
  (out * proj).sum().backward();

  const Tensor x64 = qkv.to(torch::kFloat64).requires_grad_(true);
  const Tensor ref = ReferenceAttention(x64, cos.to(torch::kFloat64), sin.to(torch::kFloat64), c.nh, c.nkv, c.hd);
  (ref * proj.to(torch::kFloat64)).sum().backward();

  EXPECT_LT((out.to(torch::kFloat64) - ref).abs().max().item<double>(), 2e-5);
  const double grad_scale = x64.grad().abs().max().item<double>();
  EXPECT_LT((x.grad().to(torch::kFloat64) - x64.grad()).abs().max().item<double>(), 2e-5 * grad_scale);
}

INSTANTIATE_TEST_SUITE_P(Shapes, FusedAttentionTest,
                         ::testing::Values(AttentionCase{2, 100, 4, 2, 8, 32},  // partial last block
                                           AttentionCase{1, 64, 2, 2, 4, 64},   // one block, rep 1
                                           AttentionCase{2, 70, 6, 2, 8, 16},   // rep 3, 5 blocks
                                           AttentionCase{1, 5, 4, 1, 2, 64}));  // shorter than a block

TEST(FusedRmsNormTest, MatchesFloat64ReferenceForwardAndBackward) {
  torch::manual_seed(3);
  const Tensor x0 = torch::randn({3, 37, 24}) * 3;
  const Tensor w0 = torch::rand({24}) + 0.5;
  const Tensor proj = torch::randn({3, 37, 24});
  const double eps = 1e-5;

  const Tensor x = x0.clone().requires_grad_(true), w = w0.clone().requires_grad_(true);
  ASSERT_TRUE(fused::Applies(x));
  const Tensor y = ops::RmsNorm(x, w, eps);
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
  const Tensor y = ops::SwiGlu(h);
  (y * proj).sum().backward();

  const Tensor h64 = h0.to(torch::kFloat64).requires_grad_(true);
  const Tensor a = h64.narrow(-1, 0, 12), b = h64.narrow(-1, 12, 12);
  const Tensor ref = a / (1 + torch::exp(-a)) * b;
  (ref * proj.to(torch::kFloat64)).sum().backward();

  EXPECT_LT((y.to(torch::kFloat64) - ref).abs().max().item<double>(), 1e-5 * ref.abs().max().item<double>());
  EXPECT_LT((h.grad().to(torch::kFloat64) - h64.grad()).abs().max().item<double>(),
            1e-5 * h64.grad().abs().max().item<double>());
}

// Runs the body with `threads` intra-op threads, so the row split really splits.
class IntraOpThreads {
 public:
  explicit IntraOpThreads(int threads) : saved_(at::get_num_threads()) { at::set_num_threads(threads); }
  ~IntraOpThreads() { at::set_num_threads(saved_); }

 private:
  int saved_;
};

// The fused kernels need the sgemm_ LibTorch carries (the pinned wheel's MKL); without
// one they are off and every CPU step silently runs the slower composite regions.
TEST(CpuBlasTest, LibTorchsBlasIsFoundAndNamed) {
  EXPECT_TRUE(cpu_blas::Available());
  EXPECT_NE(cpu_blas::GemmName(), "none");
  EXPECT_NE(cpu_blas::GemmName().find("sgemm_"), std::string::npos) << cpu_blas::GemmName();
  EXPECT_NE(cpu_blas::CoreName(), "unknown") << cpu_blas::GemmName();
  EXPECT_TRUE(fused::Enabled());
}

TEST(CpuBlasTest, SplitGemmMatchesFloat64ProductForEveryTransposition) {
  torch::manual_seed(6);
  IntraOpThreads threads(3);
  // 203 rows over 3 threads: slabs of 80, 80 and 43 rows.
  const int64_t m = 203, n = 29, k = 45;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      const Tensor a = ta ? torch::randn({k, m}) : torch::randn({m, k});
      const Tensor b = tb ? torch::randn({n, k}) : torch::randn({k, n});
      const Tensor c0 = torch::randn({m, n});
      Tensor c = c0.clone();
      cpu_blas::SplitGemm(ta, tb, m, n, k, 0.5f, a.data_ptr<float>(), a.size(1), b.data_ptr<float>(), b.size(1), 2.0f,
                          c.data_ptr<float>(), n);
      const Tensor a64 = a.to(torch::kFloat64), b64 = b.to(torch::kFloat64);
      const Tensor ref = 0.5 * torch::mm(ta ? a64.t() : a64, tb ? b64.t() : b64) + 2.0 * c0.to(torch::kFloat64);
      EXPECT_LT((c.to(torch::kFloat64) - ref).abs().max().item<double>(), 1e-4) << "ta=" << ta << " tb=" << tb;
    }
  }
}

TEST(FusedLinearTest, MatchesFloat64ConcatenatedProjectionForwardAndBackward) {
  torch::manual_seed(7);
  IntraOpThreads threads(2);
  const Tensor x0 = torch::randn({3, 37, 24});  // 111 rows: slabs of 64 and 47
  const std::vector<Tensor> w0 = {torch::randn({5, 24}), torch::randn({7, 24}), torch::randn({3, 24})};
  const Tensor proj = torch::randn({3, 37, 15});

  const Tensor x = x0.clone().requires_grad_(true);
  std::vector<Tensor> w;
  for (const auto& t : w0) w.push_back(t.clone().requires_grad_(true));
  ASSERT_TRUE(fused::Applies(x));
  const Tensor y = ops::Linear(x, w);
  ASSERT_EQ(y.sizes(), proj.sizes());
  (y * proj).sum().backward();

  const Tensor x64 = x0.to(torch::kFloat64).requires_grad_(true);
  std::vector<Tensor> w64;
  for (const auto& t : w0) w64.push_back(t.to(torch::kFloat64).requires_grad_(true));
  const Tensor ref = torch::matmul(x64, torch::cat(w64, 0).t());
  (ref * proj.to(torch::kFloat64)).sum().backward();

  EXPECT_LT((y.to(torch::kFloat64) - ref).abs().max().item<double>(), 1e-4);
  EXPECT_LT((x.grad().to(torch::kFloat64) - x64.grad()).abs().max().item<double>(), 1e-4);
  for (size_t i = 0; i < w.size(); ++i) {
    EXPECT_LT((w[i].grad().to(torch::kFloat64) - w64[i].grad()).abs().max().item<double>(), 1e-4) << "weight " << i;
  }
}

TEST(FusedGroupedExpertsTest, MatchesPerExpertFloat64ReferenceForwardAndBackward) {
  torch::manual_seed(8);
  IntraOpThreads threads(2);
  const int64_t dim = 24, hidden = 10;
  // Expert 1 gets no rows (its weight gradients must be zero), expert 3 enough rows to
  // be split across threads, expert 0 fewer than a split's minimum.
  const std::vector<int64_t> counts = {5, 0, 17, 70};
  const int64_t rows = 92, n = static_cast<int64_t>(counts.size());
  const Tensor x0 = torch::randn({rows, dim});
  const Tensor w10 = torch::randn({n, hidden, dim}) * 0.3, w20 = torch::randn({n, dim, hidden}) * 0.3,
               w30 = torch::randn({n, hidden, dim}) * 0.3;
  const Tensor proj = torch::randn({rows, dim});

  const Tensor x = x0.clone().requires_grad_(true), w1 = w10.clone().requires_grad_(true),
               w2 = w20.clone().requires_grad_(true), w3 = w30.clone().requires_grad_(true);
  const Tensor y = ops::GroupedExperts(x, counts, w1, w2, w3);
  (y * proj).sum().backward();

  auto f64 = [](const Tensor& t) { return t.to(torch::kFloat64).requires_grad_(true); };
  const Tensor x64 = f64(x0), w164 = f64(w10), w264 = f64(w20), w364 = f64(w30);
  std::vector<Tensor> outs;
  int64_t o = 0;
  for (int64_t e = 0; e < n; o += counts[e], ++e) {
    const Tensor xe = x64.narrow(0, o, counts[e]);
    const Tensor a = torch::matmul(xe, w164[e].t()), b = torch::matmul(xe, w364[e].t());
    outs.push_back(torch::matmul(a / (1 + torch::exp(-a)) * b, w264[e].t()));
  }
  const Tensor ref = torch::cat(outs, 0);
  (ref * proj.to(torch::kFloat64)).sum().backward();

  auto gap = [](const Tensor& a, const Tensor& b) { return (a.to(torch::kFloat64) - b).abs().max().item<double>(); };
  EXPECT_LT(gap(y, ref), 1e-4);
  EXPECT_LT(gap(x.grad(), x64.grad()), 1e-4);
  EXPECT_LT(gap(w1.grad(), w164.grad()), 1e-4);
  EXPECT_LT(gap(w2.grad(), w264.grad()), 1e-4);
  EXPECT_LT(gap(w3.grad(), w364.grad()), 1e-4);
  EXPECT_EQ(w1.grad()[1].abs().max().item<float>(), 0.0f);
  EXPECT_GT(w2.grad()[3].abs().max().item<float>(), 0.0f);
}

TEST(FusedGroupedExpertsTest, RefusesCountsThatDoNotCoverTheRows) {
  const Tensor x = torch::zeros({6, 4});
  const Tensor w1 = torch::zeros({2, 3, 4}), w2 = torch::zeros({2, 4, 3});
  EXPECT_THROW(ops::GroupedExperts(x, {2, 3}, w1, w2, w1), c10::Error);
  EXPECT_THROW(ops::GroupedExperts(x, {6}, w1, w2, w1), c10::Error);
}

TEST(FusedCombineTest, MatchesIndexAddReferenceForwardAndBackward) {
  torch::manual_seed(9);
  IntraOpThreads threads(2);
  // 40 tokens, top-2 rows each except token 7 (no rows) and token 8 (four rows), in a
  // shuffled order as the expert sort leaves them.
  std::vector<int64_t> ids;
  for (int64_t t = 0; t < 40; ++t) {
    if (t == 7) continue;
    for (int j = 0; j < (t == 8 ? 4 : 2); ++j) ids.push_back(t);
  }
  const Tensor token_ids = torch::tensor(ids).index_select(0, torch::randperm(static_cast<int64_t>(ids.size())));
  const int64_t rows = token_ids.size(0), dim = 12;
  const Tensor y0 = torch::randn({rows, dim}), g0 = torch::rand({rows, 1}), proj = torch::randn({40, dim});

  const Tensor y = y0.clone().requires_grad_(true), gates = g0.clone().requires_grad_(true);
  const Tensor out = ops::Combine(y, gates, token_ids, 40);
  (out * proj).sum().backward();

  const Tensor y64 = y0.to(torch::kFloat64).requires_grad_(true), g64 = g0.to(torch::kFloat64).requires_grad_(true);
  const Tensor ref = torch::zeros({40, dim}, torch::kFloat64).index_add(0, token_ids, y64 * g64);
  (ref * proj.to(torch::kFloat64)).sum().backward();

  auto gap = [](const Tensor& a, const Tensor& b) { return (a.to(torch::kFloat64) - b).abs().max().item<double>(); };
  EXPECT_LT(gap(out, ref), 1e-5);
  EXPECT_EQ(out[7].abs().max().item<float>(), 0.0f);
  EXPECT_LT(gap(y.grad(), y64.grad()), 1e-5);
  EXPECT_LT(gap(gates.grad(), g64.grad()), 1e-4);
  EXPECT_THROW(ops::Combine(y0, g0, token_ids, 30), c10::Error);  // ids reach 39
}

TEST(FusedKernelsTest, ApplyOnlyToFloat32CpuTensors) {
  EXPECT_TRUE(fused::Applies(torch::zeros({2, 2})));
  EXPECT_FALSE(fused::Applies(torch::zeros({2, 2}, torch::kFloat64)));
}

}  // namespace
}  // namespace trainyard::engine
