// spec::EstimateRankMemory on a small model whose every saved tensor is listed here by
// hand, shape by shape (docs/memory.md has the inventory), for fp32 on the fused CPU
// kernels, bf16 and the composite fp32 ops, each activation-checkpoint mode. The
// figures were checked against the engine's tracked tensor bytes on the debug preset
// (bench/memory_table.cc); here they are written out, not derived from the code.
#include "common/spec/memory_estimate.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "common/spec/presets.h"

namespace trainyard::spec {
namespace {

using ::testing::HasSubstr;

// V=1024, d=64, 2 layers (1 dense, 1 MoE), 4 heads and 2 KV heads of 16, ffn 128,
// 4 experts top-2 of hidden 32 plus 1 shared; 8 sequences of 512: N = 4096 tokens.
JobSpec Small(std::vector<std::string> sets = {}) {
  std::vector<std::string> all = {"model.vocab_size=1024", "model.dim=64",       "model.n_layers=2",
                                  "model.n_dense_layers=1", "model.n_heads=4",     "model.n_kv_heads=2",
                                  "model.ffn_hidden=128",  "model.n_routed_experts=4", "model.top_k=2",
                                  "model.n_shared_experts=1", "model.expert_hidden=32", "training.batch_size=8",
                                  "training.seq_len=512"};
  all.insert(all.end(), sets.begin(), sets.end());
  Result<JobSpec> s = FromPreset("tiny", all);
  EXPECT_TRUE(s.ok()) << (s.ok() ? "" : s.error().ToString());
  return s.value();
}

constexpr double N = 4096, d = 64, V = 1024, R = 8192;  // R = N·top_k routed rows
// Parameters: embedding 65536, head 65536, final norm 64; attention 64·64·2 + 64·32·2 =
// 12288 and 2 norms of 64 a layer; dense FFN 3·64·128 = 24576; router 64·4 = 256,
// shared 3·64·32 = 6144, 4 experts of 6144.
constexpr double kParams = 65536 + 65536 + 64 + (12288 + 128 + 24576) + (12288 + 128 + 256 + 6144 + 4 * 6144);
// Probabilities of one head over one sequence of 512: query blocks of 64, block j
// scoring 64·(j+1) keys: 64·64·(1+...+8) = 147456; 8 sequences × 4 heads a layer.
constexpr double kProbs = 8 * 4 * 147456.0;
constexpr double kF = 4, kB = 2;  // bytes of fp32 and bf16

TEST(MemoryEstimateTest, CountsEveryParameterOnce) {
  const MemoryEstimate e = EstimateRankMemory(Small());
  EXPECT_EQ(kParams, 211520);
  EXPECT_EQ(e.total_params, kParams);
  EXPECT_EQ(e.rank_params, kParams);
  EXPECT_EQ(e.state_bytes, 16 * kParams);
  // tp=2 halves attention, the dense FFN and the shared expert; ep=2 the routed experts;
  // embedding, head, norms and router stay whole.
  const MemoryEstimate split = EstimateRankMemory(Small({"parallelism.tp=2", "parallelism.ep=2"}));
  EXPECT_EQ(split.total_params, kParams);
  EXPECT_EQ(split.rank_params, 65536 + 65536 + 64 + (6144 + 128 + 12288) + (6144 + 128 + 256 + 3072 + 2 * 6144));
}

// Step state of any fp32 CPU layout of Small: weights, AdamW's moments and the
// gradient buckets (a flat copy of every gradient); RoPE tables (3 of 512·16 fp32),
// each layer's cached causal masks (2 query heads a KV head × 147456, activation dtype),
// the batch (8 × 513 int64).
void ExpectState(const MemoryEstimate& e, double mask_bytes) {
  EXPECT_EQ(e.peak.parameters, 4 * kParams);
  EXPECT_EQ(e.peak.optimizer, 8 * kParams);
  EXPECT_EQ(e.peak.communication, 4 * kParams);
  EXPECT_EQ(e.peak.other, 3 * 512 * 16 * kF + 2 * 2 * 147456 * mask_bytes + 8 * 8 * 513.0);
}

// Router bytes a routed token: fp32 scores (4 experts), top-2 ids (int64), gates, their
// sum, the sort order and token ids (int64), the sorted gates.
constexpr double kRouter = N * (4 * kF + 2 * 8 + 2 * kF + kF + 2 * 8 + 2 * 8 + 2 * kF);

TEST(MemoryEstimateTest, Fp32OnTheFusedCpuKernelsEachCheckpointMode) {
  // Attention half of a layer: its input x and 1/rms (the norm), the normed rows, the
  // q|k|v projection [N,128], RoPE'd q [N,64] and k [N,32], the probabilities, the
  // output by group and by head [N,64] each.
  const double attn_internal = N * 128 + N * 64 + N * 32 + kProbs + N * 64 + N * 64;
  const double attn = (N * d + N + N * d + attn_internal) * kF;
  // Dense half: h, 1/rms, normed, w1|w3 output [N,256], sigmoid and product [N,128].
  const double dense = (N * d + N + N * d + N * 256 + N * 128 + N * 128) * kF;
  // MoE half: h, 1/rms, normed; the router; routed rows in and out [R,64], w1|w3 [R,64],
  // sigmoid and product [R,32]; the shared expert [N,64] + 2 × [N,32].
  const double moe = (N * d + N + N * d) * kF + kRouter + (R * 64 + R * 64 + R * 64 + R * 32 + R * 32) * kF +
                     (N * 64 + N * 32 + N * 32) * kF;
  // Loss: last hidden state, 1/rms, normed rows, fp32 log-probabilities; at the loss's
  // backward their gradient and the logits' gradient besides.
  const double loss = (N * d + N + N * d + N * V) * kF + 2 * N * V * kF;

  const MemoryEstimate none = EstimateRankMemory(Small());
  EXPECT_TRUE(none.fused_cpu);
  EXPECT_EQ(none.peak_at, "the loss's backward");
  ExpectState(none, kF);
  EXPECT_EQ(none.peak.gradients, 0) << "dropped before the step, none yet at the loss";
  EXPECT_EQ(none.peak.compute_weights, 0);
  EXPECT_EQ(none.peak.activations, 2 * attn + dense + moe + loss);
  EXPECT_EQ(none.peak.activations, 129400832);
  EXPECT_EQ(none.activation_bytes, none.peak.activations);
  EXPECT_EQ(none.total_bytes(), 16 * kParams + 129400832 + 2490432);

  const MemoryEstimate selective = EstimateRankMemory(Small({"activation_checkpoint.mode=\"selective\""}));
  EXPECT_EQ(selective.peak_at, "the loss's backward");
  EXPECT_EQ(selective.peak.activations, 2 * (attn - attn_internal * kF) + dense + moe + loss);

  // Full: each layer keeps only its input [N,64].
  const MemoryEstimate full = EstimateRankMemory(Small({"activation_checkpoint.mode=\"full\""}));
  EXPECT_EQ(full.peak_at, "the loss's backward");
  EXPECT_EQ(full.peak.activations, 2 * N * d * kF + loss);
  ExpectState(full, kF);
}

TEST(MemoryEstimateTest, Bf16EachCheckpointMode) {
  // A bf16 norm keeps its input in fp32 and its square (fp32), 1/rms, and the
  // normalized rows in bf16; its output (bf16) is kept by the next projection.
  const double norm = N * d * kF * 2 + N * kF + N * d * kB + N * d * kB;
  // Attention: q [N,64], k and v [N,32] in bf16, the probabilities in bf16 and their
  // fp32 softmax, the output [N,64].
  const double attn_internal = (N * 64 + N * 32 + N * 32 + N * 64) * kB + kProbs * (kB + kF);
  const double attn = norm + attn_internal;
  // Dense: w1 and w3 outputs, silu, product [N,128] bf16.
  const double dense = norm + 4 * N * 128 * kB;
  // MoE: router as fp32; routed rows in, gate-weighted (index_add's source) and out
  // [R,64], four [R,32]; shared four [N,32].
  const double moe = norm + kRouter + (3 * R * 64 + 4 * R * 32) * kB + 4 * N * 32 * kB;
  const double loss = norm + N * V * kF + 2 * N * V * kF;
  const std::string bf16 = "training.mixed_precision=\"bf16\"";

  const MemoryEstimate none = EstimateRankMemory(Small({bf16}));
  EXPECT_FALSE(none.fused_cpu);
  EXPECT_EQ(none.peak_at, "the loss's backward");
  ExpectState(none, kB);
  EXPECT_EQ(none.peak.activations, 2 * attn + dense + moe + loss);
  EXPECT_EQ(none.peak.activations, 136740864);
  // Every weight but the token embedding has a bf16 copy.
  EXPECT_EQ(none.peak.compute_weights, (kParams - 65536) * kB);

  const MemoryEstimate selective = EstimateRankMemory(Small({bf16, "activation_checkpoint.mode=\"selective\""}));
  EXPECT_EQ(selective.peak.activations, 2 * (attn - attn_internal) + dense + moe + loss);
  EXPECT_EQ(selective.peak.compute_weights, (kParams - 65536 - 2 * 12288) * kB) << "the attention's copies go";

  const MemoryEstimate full = EstimateRankMemory(Small({bf16, "activation_checkpoint.mode=\"full\""}));
  EXPECT_EQ(full.peak_at, "the loss's backward");
  EXPECT_EQ(full.peak.activations, 2 * N * d * kB + loss);
  EXPECT_EQ(full.peak.compute_weights, (65536 + 64) * kB) << "only the output head's and final norm's";
}

TEST(MemoryEstimateTest, Fp32WithCompositeOpsOnCuda) {
  // 64 sequences (N = 32768), so the step, not the 336 MiB GEMM probe, is the peak.
  const MemoryEstimate e =
      EstimateRankMemory(Small({"resources.device=\"cuda\"", "training.batch_size=64"}));
  const double n = 8 * N, r = 8 * R, probs = 8 * kProbs;
  // The composite norm keeps x, x², 1/rms and x/rms; its output is the next op's.
  const double norm = (3 * n * d + n + n * d) * kF;
  const double attn = norm + (n * 64 + n * 32 + n * 32 + probs + n * 64) * kF;
  const double dense = norm + 4 * n * 128 * kF;
  const double moe = norm + 8 * kRouter + (3 * r * 64 + 4 * r * 32) * kF + 4 * n * 32 * kF;
  const double loss = norm + n * V * kF + 2 * n * V * kF;
  EXPECT_EQ(e.peak_at, "the loss's backward");
  EXPECT_EQ(e.peak.activations, 2 * attn + dense + moe + loss);
  // One linear over the concatenated q|k|v weight [128, 64] a layer.
  EXPECT_EQ(e.peak.compute_weights, 2 * 128 * 64 * kF);
}

TEST(MemoryEstimateTest, AccumulatedGradientsAndTheProbeBetweenSteps) {
  // From the second micro-batch on every gradient exists during the backward.
  const MemoryEstimate accum = EstimateRankMemory(Small({"training.grad_accum_steps=4"}));
  EXPECT_EQ(accum.peak.gradients, 4 * kParams);
  EXPECT_EQ(accum.all_gradients, 4 * kParams);
  // The tiny preset's step is smaller than the MFU probe's 1024³ fp32 GEMM (3 × 4 MiB),
  // which runs between steps with the gradients still there.
  Result<JobSpec> tiny = FromPreset("tiny");
  ASSERT_TRUE(tiny.ok());
  const MemoryEstimate t = EstimateRankMemory(tiny.value());
  EXPECT_EQ(t.peak_at, "the GEMM peak probe between steps");
  EXPECT_EQ(t.peak.gradients, 4 * t.rank_params);
  EXPECT_EQ(t.peak.activations, 0);
  EXPECT_GE(t.peak.other, 3 * 1024 * 1024 * kF);
}

TEST(MemoryEstimateTest, AbsurdAndEmptySpecsStayFinite) {
  JobSpec huge;
  huge.model.vocab_size = 1 << 24;
  huge.model.dim = 1 << 30;
  huge.model.n_layers = 1024;
  huge.model.n_heads = 1 << 20;
  huge.model.n_kv_heads = 1;
  huge.model.ffn_hidden = 1 << 20;
  huge.model.n_routed_experts = 4096;
  huge.model.top_k = 4096;
  huge.model.expert_hidden = 1 << 20;
  huge.training.batch_size = 1 << 20;
  huge.training.seq_len = 1 << 20;
  const MemoryEstimate e = EstimateRankMemory(huge);
  EXPECT_TRUE(std::isfinite(e.total_bytes()));
  EXPECT_GT(e.total_bytes(), 1e18);
  // What the engine's test builds: a model and nothing else (no batch, no heads).
  JobSpec empty;
  const MemoryEstimate z = EstimateRankMemory(empty);
  EXPECT_TRUE(std::isfinite(z.total_bytes()));
  EXPECT_GE(z.total_bytes(), 0);
}

TEST(MemoryEstimateTest, FormatsBytesLayoutAndBreakdown) {
  EXPECT_EQ(FormatBytes(0), "0 B");
  EXPECT_EQ(FormatBytes(1536), "1.5 KiB");
  EXPECT_EQ(FormatBytes(71.2 * 1024 * 1024 * 1024), "71.2 GiB");
  EXPECT_EQ(FormatBytes(4096.0 * (1ull << 40)), "4.1e+03 TiB");
  EXPECT_EQ(DescribeLayout(Small({"parallelism.dp=2", "parallelism.ep=2"})),
            "dp=2 tp=1 ep=2 activation_checkpoint.mode=none training.mixed_precision=fp32");
  const std::string text = DescribeBreakdown(EstimateRankMemory(Small()));
  EXPECT_EQ(text,
            "parameters 826 KiB, gradients 0 B, optimizer 1.61 MiB, activations 123 MiB, communication 826 KiB, "
            "other 2.38 MiB");
}

}  // namespace
}  // namespace trainyard::spec
