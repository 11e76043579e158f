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
  std::vector<std::string> all = {"model.vocab_size=1024",  "model.dim=64",
                                  "model.n_layers=2",       "model.n_dense_layers=1",
                                  "model.n_heads=4",        "model.n_kv_heads=2",
                                  "model.ffn_hidden=128",   "model.n_routed_experts=4",
                                  "model.top_k=2",          "model.n_shared_experts=1",
                                  "model.expert_hidden=32", "training.batch_size=8",
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

TEST(MemoryEstimateTest, CountsFlopsPerTokenByPart) {
  // Small's layers at seq_len 512: attention 6·4·(16+16)·512 = 393216 a layer; 6 a
  // parameter a token touches: the head's 65600, a dense layer's 36992, a MoE layer's
  // 12288 + 128 + 256 + 6144 + 2 experts of 6144 = 31104 (top 2 of 4).
  const FlopCounts f = CountFlops(Small().model, 512);
  EXPECT_EQ(f.active_params, 65600 + 36992 + 31104);
  EXPECT_EQ(f.attention, 393216);
  EXPECT_EQ(f.head, 6 * 65600.0);
  EXPECT_EQ(f.dense_layer, 6 * 36992.0 + 393216);
  EXPECT_EQ(f.moe_layer, 6 * 31104.0 + 393216);
  EXPECT_EQ(f.per_token, f.head + f.dense_layer + f.moe_layer);
  // Latent attention scores over the query/key width and weighs the value width:
  // deepseek_v3_debug's 8 heads of 32 + 16 and 32, so 6·8·(48+32) a position.
  const JobSpec mla = FromPreset("deepseek_v3_debug").value();
  EXPECT_EQ(CountFlops(mla.model, 100).attention, 6 * 8 * (48 + 32) * 100.0);
}

// Step state of any fp32 CPU layout of Small: weights, AdamW's moments and the
// gradient buckets (a flat copy of every gradient); RoPE tables (3 of 512·16 fp32) and
// the batch (8 × 513 int64).
void ExpectState(const MemoryEstimate& e) {
  EXPECT_EQ(e.peak.parameters, 4 * kParams);
  EXPECT_EQ(e.peak.optimizer, 8 * kParams);
  EXPECT_EQ(e.peak.communication, 4 * kParams);
  EXPECT_EQ(e.peak.other, 3 * 512 * 16 * kF + 8 * 8 * 513.0);
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
  ExpectState(none);
  EXPECT_EQ(none.peak.gradients, 0) << "dropped before the step, none yet at the loss";
  EXPECT_EQ(none.peak.compute_weights, 0);
  EXPECT_EQ(none.peak.activations, 2 * attn + dense + moe + loss);
  EXPECT_EQ(none.peak.activations, 129400832);
  EXPECT_EQ(none.activation_bytes, none.peak.activations);
  EXPECT_EQ(none.total_bytes(), 16 * kParams + 129400832 + 131136);

  const MemoryEstimate selective = EstimateRankMemory(Small({"activation_checkpoint.mode=\"selective\""}));
  EXPECT_EQ(selective.peak_at, "the loss's backward");
  EXPECT_EQ(selective.peak.activations, 2 * (attn - attn_internal * kF) + dense + moe + loss);

  // Full: each layer keeps only its input [N,64].
  const MemoryEstimate full = EstimateRankMemory(Small({"activation_checkpoint.mode=\"full\""}));
  EXPECT_EQ(full.peak_at, "the loss's backward");
  EXPECT_EQ(full.peak.activations, 2 * N * d * kF + loss);
  ExpectState(full);
}

TEST(MemoryEstimateTest, Bf16EachCheckpointMode) {
  // A bf16 norm keeps its input in fp32 and its square (fp32), 1/rms, and the
  // normalized rows in bf16; its output (bf16) is kept by the next projection.
  const double norm = N * d * kF * 2 + N * kF + N * d * kB + N * d * kB;
  // Attention (the fused CPU kernel on the upcast q|k|v): the fp32 copy of the q|k|v
  // projection [N,128], RoPE'd q [N,64] and k [N,32], the probabilities and the output
  // by group [N,64], all fp32; the output cast back to bf16 [N,64].
  const double attn_internal = (N * 128 + N * 64 + N * 32 + kProbs + N * 64) * kF + N * 64 * kB;
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
  ExpectState(none);
  EXPECT_EQ(none.peak.activations, 2 * attn + dense + moe + loss);
  EXPECT_EQ(none.peak.activations, 125206528);
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
  const MemoryEstimate e = EstimateRankMemory(Small({"resources.device=\"cuda\"", "training.batch_size=64"}));
  const double n = 8 * N, r = 8 * R;
  // The composite norm keeps x, x², 1/rms and x/rms; its output is the next op's.
  const double norm = (3 * n * d + n + n * d) * kF;
  // SDPA with K and V repeated to the 4 query heads (fp32 GQA on CUDA): RoPE'd q [n,64]
  // and k [n,32], the repeated K and V [n,64] each, the output [n,64], log-sum-exp.
  const double attn = norm + (n * 64 + n * 32 + n * 64 + n * 64 + n * 64 + n * 4) * kF;
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

// Sharded data parallelism: of Small's 211520 parameters 4 · 6144 = 24576 are routed
// experts (one MoE layer), the other 186944 are sharded over dp_shard.
constexpr double kExperts = 4 * 6144, kOthers = kParams - kExperts;
static_assert(kOthers == 186944);

TEST(MemoryEstimateTest, DpShardHalvesThePersistentStateAndAddsTheGatheredCopy) {
  const MemoryEstimate replicated = EstimateRankMemory(Small({"parallelism.dp=2"}));
  EXPECT_EQ(replicated.shard_degree, 1);
  EXPECT_EQ(replicated.shard_params, kParams);
  EXPECT_EQ(replicated.gathered_bytes, 0);
  EXPECT_EQ(replicated.state_bytes, 16 * kParams);
  EXPECT_EQ(replicated.state_bytes, 3384320);

  // dp=2 dp_shard=2 tp=1 ep=1: a replica is 2 ranks and ep=1 divides it, so the experts
  // are sharded over 2 ranks too: everything halves between steps.
  const MemoryEstimate sharded = EstimateRankMemory(Small({"parallelism.dp=2", "parallelism.dp_shard=2"}));
  EXPECT_EQ(sharded.shard_degree, 2);
  EXPECT_EQ(sharded.expert_shard_degree, 2);
  EXPECT_EQ(sharded.rank_params, kParams) << "the gathered layout is the replicated one";
  EXPECT_EQ(sharded.shard_params, 105760);
  EXPECT_EQ(sharded.state_bytes, 1692160) << "exactly half of 3384320";
  EXPECT_EQ(PersistentStateBytes(Small({"parallelism.dp=2", "parallelism.dp_shard=2"})), 1692160);
  EXPECT_EQ(sharded.gathered_bytes, 4 * kParams);
  // The peak is still the loss's backward: parameters are the shards (4 · 105760) and
  // the gathered fp32 copy (4 · 211520), AdamW the shards' (8 · 105760), the activations
  // as replicated, and no bucket yet (sharded, a bucket exists from its launch in
  // backward to the end of the reduction).
  EXPECT_EQ(sharded.peak_at, "the loss's backward");
  EXPECT_EQ(sharded.peak.parameters, 423040 + 846080);
  EXPECT_EQ(sharded.peak.optimizer, 846080);
  EXPECT_EQ(sharded.peak.gradients, 0);
  EXPECT_EQ(sharded.peak.communication, 0);
  EXPECT_EQ(sharded.peak.activations, 129400832);
  EXPECT_EQ(sharded.total_bytes(), 1269120 + 846080 + 129400832 + 131136);
  EXPECT_EQ(DescribeLayout(Small({"parallelism.dp=2", "parallelism.dp_shard=2"})),
            "dp=2 dp_shard=2 tp=1 ep=1 activation_checkpoint.mode=none training.mixed_precision=fp32");
  // 1269120 B = 1.21 MiB, 846080 B = 826 KiB.
  EXPECT_THAT(DescribeBreakdown(sharded),
              ::testing::StartsWith("parameters 1.21 MiB (826 KiB of them gathered for the step), gradients 0 B, "
                                    "optimizer 826 KiB, activations 123 MiB, other 128 KiB"));

  // bf16 weight copies are cast from the gathered weights: all but the embedding, as
  // replicated; accumulated gradients are the full ones.
  EXPECT_EQ(EstimateRankMemory(Small({"parallelism.dp=2", "parallelism.dp_shard=2", "training.mixed_precision=bf16"}))
                .peak.compute_weights,
            (kParams - 65536) * kB);
  EXPECT_EQ(EstimateRankMemory(Small({"parallelism.dp=2", "parallelism.dp_shard=2", "training.grad_accum_steps=2"}))
                .peak.gradients,
            4 * kParams);
}

TEST(MemoryEstimateTest, DpShardEndOfBackwardAndBetweenSteps) {
  // A vocabulary of 65536 (2 · 65536 · 64 = 8388608 embedding and head weights) and 8
  // tokens: the weights dominate. P = 8388608 + 64 + 36992 + 43392 = 8469056, halved
  // 4234528 at dp_shard=2. By the end of backward every bucket but the routed experts'
  // (4 · 6144, launched after backward) has launched: their 4 · (P − 24576) bytes hold
  // the sums, and the full gradients and gathered weights of those parameters are gone.
  // Left: the shards, the experts' gathered weights and gradients, the reduction's shard
  // gradients (4 · 4234528). That beats the loss's backward (the whole gathered copy)
  // and the CPU probe's 12 MiB between steps.
  const std::vector<std::string> big = {"model.vocab_size=65536", "training.batch_size=1", "training.seq_len=8",
                                        "parallelism.dp=2", "parallelism.dp_shard=2"};
  const MemoryEstimate end = EstimateRankMemory(Small(big));
  EXPECT_EQ(end.rank_params, 8469056);
  EXPECT_EQ(end.shard_params, 4234528);
  EXPECT_EQ(end.peak_at, "the end of backward");
  EXPECT_EQ(end.peak.parameters, 4 * 4234528 + 4 * 24576);
  EXPECT_EQ(end.peak.gradients, 4 * 24576 + 4 * 4234528);
  EXPECT_EQ(end.peak.optimizer, 8 * 4234528);
  EXPECT_EQ(end.peak.communication, 4 * (8469056 - 24576));
  EXPECT_EQ(end.peak.activations, 8 * 64 * kF) << "the residual stream's gradient";

  // Small with 8 tokens: the probe between steps is the peak, and then a rank holds the
  // shards only (4 · 105760 weights, 4 · 105760 gradients, 8 · 105760 moments; the
  // buckets were freed after the reduction) and the probe's 3 · 1024² fp32 operands.
  const MemoryEstimate probe = EstimateRankMemory(
      Small({"training.batch_size=1", "training.seq_len=8", "parallelism.dp=2", "parallelism.dp_shard=2"}));
  EXPECT_EQ(probe.peak_at, "the GEMM peak probe between steps");
  EXPECT_EQ(probe.peak.parameters, 423040);
  EXPECT_EQ(probe.peak.gradients, 423040);
  EXPECT_EQ(probe.peak.optimizer, 846080);
  EXPECT_EQ(probe.peak.communication, 0);
  // RoPE 3 · 8 · 16 fp32, the batch 8 · 1 · 9, the probe 3 · 1024 · 1024 fp32.
  EXPECT_EQ(probe.peak.other, 3 * 8 * 16 * kF + 8 * 9 + 3 * 1024 * 1024 * kF);
  EXPECT_THAT(DescribeBreakdown(probe), ::testing::StartsWith("parameters 413 KiB, gradients 413 KiB, "))
      << "no gathered copy between steps";
}

TEST(MemoryEstimateTest, RoutedExpertsShardOverTheirOwnGroup) {
  // dp=4 dp_shard=4 tp=1 ep=2: a replica is 4 ranks, ep=2 divides it, so each of a
  // rank's 2 experts (2 · 6144) is sharded over 4/2 = 2 ranks, the rest over 4:
  // 186944 / 4 + 12288 / 2 = 46736 + 6144 = 52880 kept, of 186944 + 12288 = 199232.
  const MemoryEstimate e =
      EstimateRankMemory(Small({"parallelism.dp=4", "parallelism.dp_shard=4", "parallelism.ep=2"}));
  EXPECT_EQ(e.shard_degree, 4);
  EXPECT_EQ(e.expert_shard_degree, 2);
  EXPECT_EQ(e.rank_params, 199232);
  EXPECT_EQ(e.shard_params, 52880);
  EXPECT_EQ(e.state_bytes, 16 * 52880);
  EXPECT_EQ(e.gathered_bytes, 4 * 199232);
  EXPECT_EQ(e.peak.parameters, 4 * 52880 + 4 * 199232);
  EXPECT_EQ(e.peak.optimizer, 8 * 52880);
  EXPECT_EQ(e.peak.communication, 0) << "the loss's backward: no bucket has launched";

  // dp=4 dp_shard=2 tp=1 ep=4: ep=4 covers two replicas of 2 ranks, does not divide 2:
  // the rank's one expert (6144) is not sharded and never gathered; 186944 / 2 + 6144 =
  // 99616 kept, and the gathered copy is of the 186944 others only.
  const MemoryEstimate whole =
      EstimateRankMemory(Small({"parallelism.dp=4", "parallelism.dp_shard=2", "parallelism.ep=4"}));
  EXPECT_EQ(whole.shard_degree, 2);
  EXPECT_EQ(whole.expert_shard_degree, 1);
  EXPECT_EQ(whole.rank_params, 193088);
  EXPECT_EQ(whole.shard_params, 99616);
  EXPECT_EQ(whole.state_bytes, 1593856);
  EXPECT_EQ(whole.gathered_bytes, 4 * 186944);
  EXPECT_EQ(whole.peak.parameters, 4 * 99616 + 4 * 186944);

  // The persistent state at dp=4 for dp_shard 1, 2, 4 (ep=1: the experts shard with the
  // rest): 16 · 211520, 16 · 105760, 16 · 52880.
  EXPECT_EQ(PersistentStateBytes(Small({"parallelism.dp=4"})), 3384320);
  EXPECT_EQ(PersistentStateBytes(Small({"parallelism.dp=4", "parallelism.dp_shard=2"})), 1692160);
  EXPECT_EQ(PersistentStateBytes(Small({"parallelism.dp=4", "parallelism.dp_shard=4"})), 846080);
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
            "dp=2 dp_shard=1 tp=1 ep=2 activation_checkpoint.mode=none training.mixed_precision=fp32");
  const std::string text = DescribeBreakdown(EstimateRankMemory(Small()));
  EXPECT_EQ(text,
            "parameters 826 KiB, gradients 0 B, optimizer 1.61 MiB, activations 123 MiB, communication 826 KiB, "
            "other 128 KiB");
}

}  // namespace
}  // namespace trainyard::spec
