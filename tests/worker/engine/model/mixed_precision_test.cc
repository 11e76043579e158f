// bf16 mixed precision (training.mixed_precision = "bf16"; the policy is in
// worker/engine/model/regions/projection.h): fp32 weights and gradients, bf16 compute,
// fp32 statistics. Each region is checked against its fp32 self and against the policy
// written out here by hand, and a whole model's loss and gradients against fp32.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <string>
#include <vector>

#include "worker/engine/config/engine_config.h"
#include "worker/engine/model/layers/attention_layer.h"
#include "worker/engine/model/layers/dense_ffn.h"
#include "worker/engine/model/layers/rms_norm.h"
#include "worker/engine/model/layers/rotary_embedding.h"
#include "worker/engine/model/moe/moe_router.h"
#include "worker/engine/model/transformer_model.h"

namespace trainyard::engine {
namespace {

torch::Tensor Draw(std::vector<int64_t> shape, uint64_t seed, double scale = 1.0) {
  auto gen = at::detail::createCPUGenerator(seed);
  return torch::empty(shape).normal_(0.0, scale, gen);
}

double RelL2(const torch::Tensor& got, const torch::Tensor& want) {
  return (got.to(torch::kFloat64) - want.to(torch::kFloat64)).norm().item<double>() /
         want.to(torch::kFloat64).norm().item<double>();
}

TEST(MixedPrecisionTest, RmsNormNormalizesInFp32AndScalesInBf16) {
  const auto x = Draw({3, 5, 16}, 1).to(torch::kBFloat16);
  const auto w = Draw({16}, 2).add_(1.0);
  const auto got = regions::Normalize(x, w, 1e-5);
  ASSERT_EQ(got.scalar_type(), torch::kBFloat16);
  // The policy by hand: statistics of the bf16 input taken in fp64 (as good as fp32's),
  // rounded to bf16, times the bf16-rounded weight, rounded again.
  const auto xd = x.to(torch::kFloat64);
  const auto normed = (xd / (xd.pow(2).mean(-1, true) + 1e-5).sqrt()).to(torch::kBFloat16);
  const auto want = (normed.to(torch::kFloat64) * w.to(torch::kBFloat16).to(torch::kFloat64)).to(torch::kBFloat16);
  // At most one bf16 rounding step apart (2^-8 relative) element by element.
  EXPECT_LE(
      ((got.to(torch::kFloat64) - want.to(torch::kFloat64)).abs() / want.to(torch::kFloat64).abs().clamp_min(1e-3))
          .max()
          .item<double>(),
      1.0 / 128);
  // And close to the fp32 norm of the same input.
  EXPECT_LT(RelL2(got, regions::Normalize(x.to(torch::kFloat), w, 1e-5)), 1e-2);
}

TEST(MixedPrecisionTest, AttentionAndFfnComputeInBf16WithFp32WeightsAndGetFp32Gradients) {
  const int64_t dim = 32, heads = 4, kv = 2, hd = dim / heads, t = 12;
  auto x = Draw({2, t, dim}, 3);
  std::vector<torch::Tensor> w = {Draw({heads * hd, dim}, 4, 0.2), Draw({kv * hd, dim}, 5, 0.2),
                                  Draw({kv * hd, dim}, 6, 0.2), Draw({dim, heads * hd}, 7, 0.2)};
  for (auto& p : w) p.requires_grad_(true);
  RotaryEmbedding rope(hd, t, 10000.0);
  auto constants = [&] { return std::vector<torch::Tensor>{rope.CosTable(t), rope.SinTable(t)}; };
  const auto fn = regions::Attention(heads, kv, hd, AttentionImpl::kQueryBlock);
  std::vector<torch::Tensor> in16 = constants();
  in16.insert(in16.begin(), x.to(torch::kBFloat16));
  const auto out16 = fn(in16, w)[0];
  ASSERT_EQ(out16.scalar_type(), torch::kBFloat16) << "the activations stay bf16";
  out16.to(torch::kFloat).pow(2).sum().backward();
  std::vector<torch::Tensor> grads16;
  for (auto& p : w) {
    ASSERT_TRUE(p.grad().defined());
    EXPECT_EQ(p.grad().scalar_type(), torch::kFloat) << "the weight's gradient is fp32";
    grads16.push_back(p.grad().clone());
    p.mutable_grad() = torch::Tensor();
  }
  EXPECT_EQ(w[0].scalar_type(), torch::kFloat) << "the weights stay fp32";

  std::vector<torch::Tensor> in32 = constants();
  in32.insert(in32.begin(), x.to(torch::kBFloat16).to(torch::kFloat));
  const auto out32 = fn(in32, w)[0];
  out32.pow(2).sum().backward();
  // bf16 carries 8 significant bits: a few roundings deep, within 2 % of fp32, and not
  // equal to it (the computation really ran in bf16).
  const double out_err = RelL2(out16, out32);
  EXPECT_LT(out_err, 2e-2);
  EXPECT_GT(out_err, 1e-5);
  for (size_t i = 0; i < w.size(); ++i) EXPECT_LT(RelL2(grads16[i], w[i].grad()), 5e-2) << "weight " << i;

  const auto ffn = regions::Ffn();
  std::vector<torch::Tensor> fw = {Draw({48, dim}, 8, 0.2), Draw({dim, 48}, 9, 0.2), Draw({48, dim}, 10, 0.2)};
  const auto f16 = ffn({x.to(torch::kBFloat16)}, fw)[0];
  ASSERT_EQ(f16.scalar_type(), torch::kBFloat16);
  EXPECT_LT(RelL2(f16, ffn({x.to(torch::kBFloat16).to(torch::kFloat)}, fw)[0]), 2e-2);
}

TEST(MixedPrecisionTest, TheRouterScoresInFp32AndRoutesBf16Rows) {
  const int64_t dim = 16, experts = 8, top_k = 2, n = 10;
  const auto fn = regions::Router(top_k, "softmax", /*route_norm=*/false, /*route_scale=*/1.0, torch::Tensor());
  const auto x = Draw({n, dim}, 11).to(torch::kBFloat16);
  const auto gate = Draw({experts, dim}, 12, 0.5);
  const auto out = fn({x, torch::zeros({experts})}, {gate});
  EXPECT_EQ(out[0].scalar_type(), torch::kBFloat16) << "routed rows";
  ASSERT_EQ(out[1].scalar_type(), torch::kFloat) << "gates";
  // Gates by hand: softmax in fp64 of the bf16 logits (bf16 GEMM, fp32 accumulation).
  const auto logits = torch::matmul(x.to(torch::kFloat64), gate.to(torch::kBFloat16).to(torch::kFloat64).t())
                          .to(torch::kBFloat16)
                          .to(torch::kFloat64);
  const auto probs = torch::softmax(logits, -1);
  const auto top = std::get<0>(torch::topk(probs, top_k, -1));
  EXPECT_NEAR(out[1].sum().item<double>(), top.sum().item<double>(), 1e-4 * n);
}

TEST(MixedPrecisionTest, ABf16ModelKeepsFp32WeightsAndMatchesFp32WithinBf16Precision) {
  const ModelConfig c = TinyEngineConfig().model;
  const int64_t t = 16;
  auto tokens = torch::randint(0, c.vocab_size, {2, t + 1}, at::detail::createCPUGenerator(13));
  auto run = [&](torch::ScalarType dtype, std::vector<torch::Tensor>* grads) {
    ModelOptions o;
    o.compute_dtype = dtype;
    TransformerModel model(c, t, ParallelContext{}, o);
    model->InitWeights(7);
    auto out = model(tokens.narrow(1, 0, t), tokens.narrow(1, 1, t));
    EXPECT_EQ(out.loss.scalar_type(), torch::kFloat) << "the loss is fp32";
    out.loss.backward();
    for (auto& p : model->parameters()) {
      EXPECT_EQ(p.scalar_type(), torch::kFloat);
      EXPECT_TRUE(p.grad().defined());
      if (p.grad().defined()) {
        EXPECT_EQ(p.grad().scalar_type(), torch::kFloat);
        grads->push_back(p.grad().clone());
      }
    }
    auto logits = model(tokens.narrow(1, 0, t)).logits;
    EXPECT_EQ(logits.scalar_type(), torch::kFloat) << "evaluation logits come back as fp32";
    return out.loss.item<double>();
  };
  std::vector<torch::Tensor> g16, g32;
  const double l16 = run(torch::kBFloat16, &g16), l32 = run(torch::kFloat, &g32);
  EXPECT_NEAR(l16, l32, 1e-2 * l32);
  EXPECT_NE(l16, l32) << "the bf16 model must not silently compute in fp32";
  ASSERT_EQ(g16.size(), g32.size());
  for (size_t i = 0; i < g16.size(); ++i) EXPECT_LT(RelL2(g16[i], g32[i]), 0.1) << "parameter " << i;

  ModelOptions half;
  half.compute_dtype = torch::kHalf;
  EXPECT_THROW(TransformerModel(c, t, ParallelContext{}, half), c10::Error) << "only fp32 and bf16";
}

}  // namespace
}  // namespace trainyard::engine
