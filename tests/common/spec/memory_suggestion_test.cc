// spec::SuggestLayout: a layout of the same world size that fits, fewest changed keys
// first, then the smallest estimate; or the smallest when none fits.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "common/spec/memory_estimate.h"
#include "common/spec/presets.h"
#include "common/spec/rules.h"

namespace trainyard::spec {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::StartsWith;

JobSpec Debug(std::vector<std::string> sets) {
  Result<JobSpec> s = FromPreset("debug", sets);
  EXPECT_TRUE(s.ok()) << (s.ok() ? "" : s.error().ToString());
  return s.value();
}

// 8 ranks of a debug model whose 64 routed experts of hidden 2048 dominate (3 MoE layers
// of 64 × 3·256·2048 weights: 302M parameters) over activations of 4 × 1024 tokens:
// expert parallelism shrinks a rank most, checkpointing somewhat.
JobSpec ExpertHeavy(std::vector<std::string> sets = {}) {
  std::vector<std::string> all = {"model.n_routed_experts=64", "model.expert_hidden=2048", "training.batch_size=4",
                                  "training.seq_len=1024", "parallelism.dp=8"};
  all.insert(all.end(), sets.begin(), sets.end());
  return Debug(all);
}

TEST(MemorySuggestionTest, FewestChangedKeysThenTheSmallestEstimate) {
  const JobSpec spec = ExpertHeavy();
  const double ep8 = EstimateRankMemory(ExpertHeavy({"parallelism.ep=8"})).total_bytes();
  const double ep4 = EstimateRankMemory(ExpertHeavy({"parallelism.ep=4"})).total_bytes();
  const double ep8_full =
      EstimateRankMemory(ExpertHeavy({"parallelism.ep=8", "activation_checkpoint.mode=\"full\""})).total_bytes();
  ASSERT_LT(ep8, ep4);
  ASSERT_LT(ep8_full, ep8) << "a smaller layout with two changes exists";
  ASSERT_GT(EstimateRankMemory(spec).total_bytes(), ep4);

  // Below ep=4's figure only ep=8 fits among the one-key changes (tp=2 or 4 split no
  // expert, checkpointing none): it wins over ep=8 + full, which changes two keys.
  const LayoutSuggestion s = SuggestLayout(spec, (ep8 + ep4) / 2);
  ASSERT_TRUE(s.fits);
  EXPECT_THAT(s.changed, ElementsAre("ep=8"));
  EXPECT_EQ(s.spec.parallelism.dp, 8);
  EXPECT_EQ(s.spec.parallelism.tp, 1);
  EXPECT_EQ(s.spec.parallelism.ep, 8);
  EXPECT_EQ(s.spec.activation_checkpoint.mode, "none");
  EXPECT_EQ(s.estimate.total_bytes(), ep8);
  EXPECT_EQ(DescribeSuggestion(spec, s), "fits at ep=8: " + FormatBytes(ep8));
  // Above ep=4's figure both fit: the smaller, ep=8, is named.
  EXPECT_THAT(SuggestLayout(spec, ep4 * 1.01).changed, ElementsAre("ep=8"));
  // Every (tp, dp_shard, ep, mode) the rules accept: tp 1, 2, 4 (8 does not divide 4 KV
  // heads) with dp 8, 4, 2 and dp_shard any divisor of that dp (4, 3 and 2 of them); ep
  // 1, 2, 4, 8 (each divides dp_shard·tp or is a multiple of it); three modes.
  EXPECT_EQ(s.candidates, (4 + 3 + 2) * 4 * 3);
  // Just below ep=8's figure two keys must change; of those layouts tp=4 (with dp=2)
  // and ep=8 is smaller than ep=8 with full checkpointing, and is named.
  const double tp4_ep8 =
      EstimateRankMemory(ExpertHeavy({"parallelism.dp=2", "parallelism.tp=4", "parallelism.ep=8"})).total_bytes();
  ASSERT_LT(tp4_ep8, ep8_full);
  const LayoutSuggestion two = SuggestLayout(spec, (ep8 + ep8_full) / 2);
  ASSERT_TRUE(two.fits);
  EXPECT_THAT(two.changed, ElementsAre("dp=2 tp=4", "ep=8"));
  EXPECT_EQ(DescribeSuggestion(spec, two), "fits at dp=2 tp=4 ep=8: " + FormatBytes(tp4_ep8));
  // Below that, three keys.
  const LayoutSuggestion three = SuggestLayout(spec, tp4_ep8 * 0.99);
  ASSERT_TRUE(three.fits);
  EXPECT_EQ(three.changed.size(), 3u);
}

TEST(MemorySuggestionTest, CheckpointingSavesLongSequences) {
  // One rank, sequences of 4096: only activation checkpointing can help.
  const JobSpec one = Debug({"training.seq_len=4096", "training.batch_size=2"});
  const double selective =
      EstimateRankMemory(Debug({"training.seq_len=4096", "training.batch_size=2",
                                "activation_checkpoint.mode=\"selective\""}))
          .total_bytes();
  const double full = EstimateRankMemory(Debug({"training.seq_len=4096", "training.batch_size=2",
                                                "activation_checkpoint.mode=\"full\""}))
                          .total_bytes();
  ASSERT_LT(full, selective);
  const LayoutSuggestion s = SuggestLayout(one, (full + selective) / 2);
  ASSERT_TRUE(s.fits);
  EXPECT_THAT(s.changed, ElementsAre("activation_checkpoint.mode=full"));
  EXPECT_EQ(s.candidates, 3) << "world 1: tp = ep = 1, three modes";
}

TEST(MemorySuggestionTest, TensorParallelismMovesDpWithTp) {
  // 4 ranks of an all-dense model with FFNs of 65536: only TP splits its weights; a
  // layout with tp = 4 has dp = 1, and the two are one change.
  const std::vector<std::string> dense = {"model.n_dense_layers=4", "model.ffn_hidden=65536", "training.batch_size=1",
                                          "training.seq_len=64"};
  auto with = [&](std::vector<std::string> sets) {
    sets.insert(sets.end(), dense.begin(), dense.end());
    return Debug(sets);
  };
  const JobSpec four = with({"parallelism.dp=4"});
  const double tp2 = EstimateRankMemory(with({"parallelism.dp=2", "parallelism.tp=2"})).total_bytes();
  const double tp4 = EstimateRankMemory(with({"parallelism.tp=4"})).total_bytes();
  ASSERT_LT(tp4, tp2);
  ASSERT_LT(tp2, EstimateRankMemory(four).total_bytes());
  const LayoutSuggestion t = SuggestLayout(four, (tp4 + tp2) / 2);
  ASSERT_TRUE(t.fits);
  EXPECT_THAT(t.changed, ElementsAre("dp=1 tp=4"));
  EXPECT_EQ(t.spec.parallelism.dp, 1);
  EXPECT_EQ(t.spec.parallelism.tp, 4);
  EXPECT_FALSE(Validate(t.spec).has_value()) << "a suggestion always passes the rules";
  EXPECT_EQ(DescribeSuggestion(four, t), "fits at dp=1 tp=4: " + FormatBytes(tp4));
}

TEST(MemorySuggestionTest, ShardingTheDataParallelStateAloneFits) {
  // 4 ranks of an all-dense model with one KV head (so tp stays 1, and no expert for ep
  // to split) whose vocabulary of 65536 makes the weights most of a rank: 2 · 65536 · 256
  // embedding and head weights. Only dp_shard shrinks what a rank keeps (16 B a weight
  // over dp_shard, plus the step's gathered 4 B); checkpointing trims a little.
  const std::vector<std::string> dense = {"model.n_dense_layers=4", "model.n_kv_heads=1", "model.vocab_size=65536",
                                          "training.batch_size=1", "training.seq_len=64", "parallelism.dp=4"};
  auto with = [&](std::vector<std::string> sets) {
    sets.insert(sets.begin(), dense.begin(), dense.end());
    return Debug(sets);
  };
  const JobSpec spec = with({});
  const double shard2 = EstimateRankMemory(with({"parallelism.dp_shard=2"})).total_bytes();
  const double shard4 = EstimateRankMemory(with({"parallelism.dp_shard=4"})).total_bytes();
  double unsharded = EstimateRankMemory(spec).total_bytes();
  for (const char* mode : {"selective", "full"}) {
    unsharded =
        std::min(unsharded, EstimateRankMemory(with({std::string("activation_checkpoint.mode=") + mode})).total_bytes());
  }
  ASSERT_LT(shard4, shard2);
  ASSERT_LT(shard2, unsharded);
  // Below every unsharded layout: dp_shard=4 (smaller than dp_shard=2) is named, alone.
  const LayoutSuggestion s = SuggestLayout(spec, (shard2 + unsharded) / 2);
  ASSERT_TRUE(s.fits);
  EXPECT_THAT(s.changed, ElementsAre("dp_shard=4"));
  EXPECT_EQ(s.spec.parallelism.dp_shard, 4);
  EXPECT_EQ(s.spec.parallelism.dp, 4);
  EXPECT_EQ(s.spec.parallelism.tp, 1);
  EXPECT_EQ(s.spec.activation_checkpoint.mode, "none");
  EXPECT_EQ(DescribeSuggestion(spec, s), "fits at dp_shard=4: " + FormatBytes(shard4));
  // tp 1 only, dp_shard 1, 2, 4, ep 1, 2, 4 (each divides 8 experts and 4 ranks; with
  // dp_shard 2, ep 4 covers two replicas), three modes.
  EXPECT_EQ(s.candidates, 3 * 3 * 3);
  // Between dp_shard=4's figure and dp_shard=2's only dp_shard=4 fits.
  EXPECT_THAT(SuggestLayout(spec, (shard4 + shard2) / 2).changed, ElementsAre("dp_shard=4"));

  // A dp_replicate the spec gives follows dp_shard and is named with it.
  const LayoutSuggestion given = SuggestLayout(with({"parallelism.dp_replicate=4"}), (shard2 + unsharded) / 2);
  ASSERT_TRUE(given.fits);
  EXPECT_THAT(given.changed, ElementsAre("dp_shard=4 dp_replicate=1"));
  EXPECT_EQ(given.spec.parallelism.dp_replicate, 1);
  EXPECT_FALSE(Validate(given.spec).has_value());
}

TEST(MemorySuggestionTest, SaysSoWhenNoLayoutOfTheWorldSizeFits) {
  const JobSpec spec = ExpertHeavy();
  const LayoutSuggestion s = SuggestLayout(spec, 1 << 20);
  EXPECT_FALSE(s.fits);
  EXPECT_EQ(s.candidates, 108);
  // The smallest of them is named with its figure.
  for (const char* mode : {"none", "selective", "full"}) {
    for (int ep : {1, 2, 4, 8}) {
      for (int dp_shard : {1, 2, 4, 8}) {
        const std::vector<std::string> sets = {"parallelism.ep=" + std::to_string(ep),
                                               "parallelism.dp_shard=" + std::to_string(dp_shard),
                                               std::string("activation_checkpoint.mode=\"") + mode + "\""};
        EXPECT_LE(s.estimate.total_bytes(), EstimateRankMemory(ExpertHeavy(sets)).total_bytes());
      }
    }
  }
  const std::string text = DescribeSuggestion(spec, s);
  EXPECT_THAT(text, StartsWith("no layout of dp·tp=8 ranks fits (the smallest, "));
  EXPECT_THAT(text, HasSubstr(", needs " + FormatBytes(s.estimate.total_bytes()) + ")"));
  // A world of one with nothing to change but the mode says the same.
  JobSpec tiny = Debug({"model.preset=\"tiny\""});
  EXPECT_THAT(DescribeSuggestion(tiny, SuggestLayout(tiny, 1)), StartsWith("no layout of dp·tp=1 ranks fits"));
}

}  // namespace
}  // namespace trainyard::spec
