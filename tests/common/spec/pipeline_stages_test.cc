// The pipeline split (common/spec/pipeline_stages.h): the unit costs against a model
// counted by hand, the balanced split against every contiguous split enumerated, the
// pp_layers_per_stage override, and the models too small to split.
#include "common/spec/pipeline_stages.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "common/spec/presets.h"

namespace trainyard::spec {
namespace {

// A valid pp = 1 spec of `preset`, then the pipeline keys written straight into it (a
// spec with pp > 1 does not validate in this release).
JobSpec Pipelined(const std::string& preset, const std::vector<std::string>& sets, int pp,
                  const std::string& schedule = "1f1b", int virtual_stages = 0) {
  Result<JobSpec> r = FromPreset(preset, sets);
  EXPECT_TRUE(r.ok()) << preset << ": " << r.error().ToString();
  JobSpec s = r.value();
  s.parallelism.pp = pp;
  s.parallelism.pp_schedule = schedule;
  s.parallelism.pp_virtual_stages = virtual_stages;
  return s;
}

// The cost of the costliest stage of the split whose stages start at `firsts` (stage 0
// at layer 0), summed the plain way.
double WorstStage(const PipelineCosts& c, const std::vector<int>& firsts) {
  const int n = static_cast<int>(c.layers.size());
  double worst = 0;
  for (std::size_t s = 0; s < firsts.size(); ++s) {
    const int last = s + 1 < firsts.size() ? firsts[s + 1] : n;
    double cost = (s == 0 ? c.embedding : 0) + (last == n ? c.head : 0);
    for (int i = firsts[s]; i < last; ++i) cost += c.layers[i];
    worst = std::max(worst, cost);
  }
  return worst;
}

// Every split of the layers into `stages` non-empty runs, as its first layers.
void EachSplit(int n, int stages, const std::function<void(const std::vector<int>&)>& visit) {
  std::vector<int> firsts = {0};
  std::function<void(int)> place = [&](int next) {
    if (static_cast<int>(firsts.size()) == stages) {
      visit(firsts);
      return;
    }
    const int left = stages - static_cast<int>(firsts.size());  // stages still to start
    for (int first = next; first <= n - left; ++first) {
      firsts.push_back(first);
      place(first + 1);
      firsts.pop_back();
    }
  };
  place(1);
}

double SquaredStages(const PipelineCosts& c, const std::vector<int>& firsts) {
  const int n = static_cast<int>(c.layers.size());
  double sum = 0;
  for (std::size_t s = 0; s < firsts.size(); ++s) {
    const int last = s + 1 < firsts.size() ? firsts[s + 1] : n;
    double cost = (s == 0 ? c.embedding : 0) + (last == n ? c.head : 0);
    for (int i = firsts[s]; i < last; ++i) cost += c.layers[i];
    sum += cost * cost;
  }
  return sum;
}

// By enumeration: the least worst stage, and of the splits that reach it (to 1e-9,
// the header's tie), the least sum of squared stage costs.
struct Best {
  double worst = INFINITY;
  double squares = INFINITY;
};
Best BruteForceBest(const PipelineCosts& c, int stages) {
  const int n = static_cast<int>(c.layers.size());
  Best best;
  EachSplit(n, stages,
            [&](const std::vector<int>& firsts) { best.worst = std::min(best.worst, WorstStage(c, firsts)); });
  EachSplit(n, stages, [&](const std::vector<int>& firsts) {
    if (WorstStage(c, firsts) <= best.worst * (1 + 1e-9))
      best.squares = std::min(best.squares, SquaredStages(c, firsts));
  });
  return best;
}

// The stages are the layers in order, each non-empty, with the embedding on the first,
// the head on the last, and stage i on pp rank i mod pp.
void ExpectWellFormed(const std::vector<PipelineStage>& stages, const JobSpec& spec) {
  ASSERT_EQ(static_cast<int>(stages.size()), spec.parallelism.pipeline_stages());
  int next = 0;
  for (std::size_t i = 0; i < stages.size(); ++i) {
    const PipelineStage& st = stages[i];
    EXPECT_EQ(st.index, static_cast<int>(i));
    EXPECT_EQ(st.rank, static_cast<int>(i) % spec.parallelism.pp);
    EXPECT_EQ(st.first_layer, next);
    EXPECT_GE(st.layers(), 1) << "stage " << i;
    EXPECT_EQ(st.embedding, i == 0);
    EXPECT_EQ(st.head, i + 1 == stages.size());
    next = st.last_layer;
  }
  EXPECT_EQ(next, spec.model.n_layers);
}

std::vector<int> Firsts(const std::vector<PipelineStage>& stages) {
  std::vector<int> out;
  for (const PipelineStage& st : stages) out.push_back(st.first_layer);
  return out;
}

std::vector<int> LayerCounts(const std::vector<PipelineStage>& stages) {
  std::vector<int> out;
  for (const PipelineStage& st : stages) out.push_back(st.layers());
  return out;
}

TEST(PipelineStagesTest, UnitCostsAreShareOfParametersPlusShareOfFlops) {
  // Counted by hand: vocab 16, dim 8, 2 heads of 4 (no GQA), seq_len 4; layer 0 dense
  // (ffn_hidden 16), layer 1 MoE (4 experts of hidden 8, top 1, no shared expert).
  JobSpec s = Pipelined("debug",
                        {"model.vocab_size=16", "model.dim=8", "model.n_layers=2", "model.n_dense_layers=1",
                         "model.n_heads=2", "model.n_kv_heads=2", "model.ffn_hidden=16", "model.n_routed_experts=4",
                         "model.top_k=1", "model.n_shared_experts=0", "model.expert_hidden=8", "training.seq_len=4"},
                        1);
  // Parameters: embedding 128; head 128 + 8; attention 256 and norms 16 a layer; dense
  // FFN 384; MoE: router 32, 4 experts of 192 (1 active). Total 1992.
  // FLOPs a token: attention 6·2·(4+4)·4 = 384 a layer; head 6·136 = 816; dense
  // 6·656 + 384 = 4320; MoE 6·(256+16+32+192) + 384 = 3360. Total 8496.
  const PipelineCosts c = PipelineUnitCosts(s);
  EXPECT_DOUBLE_EQ(c.embedding, 128.0 / 1992);
  EXPECT_DOUBLE_EQ(c.head, 136.0 / 1992 + 816.0 / 8496);
  ASSERT_EQ(c.layers.size(), 2u);
  EXPECT_DOUBLE_EQ(c.layers[0], 656.0 / 1992 + 4320.0 / 8496);
  EXPECT_DOUBLE_EQ(c.layers[1], 1072.0 / 1992 + 3360.0 / 8496);

  Result<std::vector<PipelineStage>> split = SplitPipelineStages(Pipelined("debug", {}, 1));
  ASSERT_TRUE(split.ok()) << split.error().ToString();
  ASSERT_EQ(split.value().size(), 1u);
  EXPECT_NEAR(split.value()[0].cost, 2.0, 1e-12) << "one stage holds every share of both";
}

TEST(PipelineStagesTest, BalancedSplitIsTheBestContiguousSplit) {
  struct Model {
    const char* name;
    const char* preset;
    std::vector<std::string> sets;
  };
  const std::vector<Model> models = {
      {"debug, 3 of 9 layers dense", "debug", {"model.n_layers=9", "model.n_dense_layers=3"}},
      // Dense layers heavier than the MoE ones: a wide dense FFN, small experts.
      {"heavy dense layers",
       "debug",
       {"model.n_layers=10", "model.n_dense_layers=2", "model.ffn_hidden=8192", "model.expert_hidden=32"}},
      // A vocabulary far larger than a layer: the first and last stages shed layers.
      {"big vocabulary", "debug", {"model.n_layers=10", "model.vocab_size=65536"}},
      {"latent attention, 2 dense", "deepseek_v3_debug", {"model.n_layers=8", "model.n_dense_layers=2"}},
      {"no dense layer", "qwen3_moe_debug", {"model.n_layers=11"}},
      {"all dense", "tiny", {"model.n_layers=7", "model.n_dense_layers=7"}},
  };
  struct Layout {
    int pp;
    const char* schedule;
    int virtual_stages;
  };
  const std::vector<Layout> layouts = {{2, "1f1b", 0},
                                       {3, "1f1b", 0},
                                       {4, "1f1b", 0},
                                       {2, "interleaved_1f1b", 0},
                                       {2, "interleaved_1f1b", 3},
                                       {3, "interleaved_1f1b", 2}};
  int compared = 0;
  for (const Model& m : models) {
    for (const Layout& l : layouts) {
      const JobSpec s = Pipelined(m.preset, m.sets, l.pp, l.schedule, l.virtual_stages);
      if (s.parallelism.pipeline_stages() > s.model.n_layers) continue;
      SCOPED_TRACE(std::string(m.name) + ", pp=" + std::to_string(l.pp) + " " + l.schedule +
                   " v=" + std::to_string(s.parallelism.virtual_stages()));
      Result<std::vector<PipelineStage>> split = SplitPipelineStages(s);
      ASSERT_TRUE(split.ok()) << split.error().ToString();
      ExpectWellFormed(split.value(), s);
      const PipelineCosts c = PipelineUnitCosts(s);
      double worst = 0;
      for (const PipelineStage& st : split.value()) worst = std::max(worst, st.cost);
      EXPECT_NEAR(worst, WorstStage(c, Firsts(split.value())), 1e-12) << "stage costs as reported";
      const Best best = BruteForceBest(c, s.parallelism.pipeline_stages());
      EXPECT_NEAR(worst, best.worst, 1e-12);
      EXPECT_NEAR(SquaredStages(c, Firsts(split.value())), best.squares, 1e-12) << "the most even of the best";
      ++compared;
    }
  }
  EXPECT_GE(compared, 30);
}

TEST(PipelineStagesTest, BalancedSplitOfRandomCostsIsTheBestByEnumeration) {
  // Costs no model has (a heavy layer in the middle, light ends, ties): the split is
  // the least worst stage and the most even of those, whatever the costs.
  std::mt19937_64 rng(20260501);
  std::uniform_int_distribution<int> small(1, 6);  // small integers: many exact ties
  std::uniform_real_distribution<double> any(0.0, 1.0);
  for (int trial = 0; trial < 400; ++trial) {
    PipelineCosts c;
    const int n = 1 + static_cast<int>(rng() % 10);
    const bool ties = trial % 2 == 0;
    c.embedding = ties ? small(rng) - 1 : any(rng);
    c.head = ties ? small(rng) - 1 : any(rng);
    for (int i = 0; i < n; ++i) c.layers.push_back(ties ? small(rng) : any(rng));
    const int stages = 1 + static_cast<int>(rng() % n);
    SCOPED_TRACE("trial " + std::to_string(trial) + ": " + std::to_string(n) + " layers, " + std::to_string(stages) +
                 " stages");
    const std::vector<int> firsts = BalancedStageFirsts(c, stages);
    ASSERT_EQ(static_cast<int>(firsts.size()), stages);
    EXPECT_EQ(firsts[0], 0);
    for (int s = 1; s < stages; ++s) EXPECT_LT(firsts[s - 1], firsts[s]);
    EXPECT_LT(firsts.back(), n);
    const Best best = BruteForceBest(c, stages);
    EXPECT_NEAR(WorstStage(c, firsts), best.worst, 1e-12);
    EXPECT_NEAR(SquaredStages(c, firsts), best.squares, 1e-12);
  }
}

TEST(PipelineStagesTest, DenseLayersDifferFromMoeLayersAndABigVocabularyPushesLayersInward) {
  const JobSpec heavy_dense = Pipelined(
      "debug", {"model.n_layers=10", "model.n_dense_layers=2", "model.ffn_hidden=8192", "model.expert_hidden=32"}, 2);
  const PipelineCosts dense_costs = PipelineUnitCosts(heavy_dense);
  EXPECT_GT(dense_costs.layers[0], 2 * dense_costs.layers[9]) << "a dense layer with a wide FFN is the heavy one";
  EXPECT_EQ(dense_costs.layers[0], dense_costs.layers[1]);
  EXPECT_EQ(dense_costs.layers[2], dense_costs.layers[9]);

  // Uniform MoE layers and a small vocabulary: two layers a stage.
  const JobSpec even = Pipelined("debug", {"model.n_layers=8", "model.n_dense_layers=0"}, 4);
  ASSERT_LT(PipelineUnitCosts(even).head, PipelineUnitCosts(even).layers[0]);
  EXPECT_THAT(LayerCounts(SplitPipelineStages(even).value()), ::testing::ElementsAre(2, 2, 2, 2));

  // The same model with a vocabulary of 65536: embedding and head outweigh several
  // layers, so the first and last stages hold fewer layers than the middle ones.
  const JobSpec wide = Pipelined("debug", {"model.n_layers=8", "model.n_dense_layers=0", "model.vocab_size=65536"}, 4);
  const std::vector<int> counts = LayerCounts(SplitPipelineStages(wide).value());
  ASSERT_EQ(counts.size(), 4u);
  EXPECT_LT(counts[0], std::min(counts[1], counts[2]));
  EXPECT_LT(counts[3], std::min(counts[1], counts[2]));
  EXPECT_EQ(std::accumulate(counts.begin(), counts.end(), 0), 8);
}

TEST(PipelineStagesTest, LargeModelSplitCannotBeImprovedByMovingOneCut) {
  // DeepSeek-V3 671B (61 layers, 3 dense) over pp=8: too many splits to enumerate, so
  // check that no single cut moved by one layer lowers the costliest stage.
  const JobSpec s = Pipelined("deepseek_v3_671b", {}, 8);
  Result<std::vector<PipelineStage>> split = SplitPipelineStages(s);
  ASSERT_TRUE(split.ok()) << split.error().ToString();
  ExpectWellFormed(split.value(), s);
  const PipelineCosts c = PipelineUnitCosts(s);
  const std::vector<int> firsts = Firsts(split.value());
  const double worst = WorstStage(c, firsts);
  EXPECT_GE(worst, 2.0 / 8 - 1e-12) << "no stage is below the mean";
  for (std::size_t k = 1; k < firsts.size(); ++k) {
    for (int step : {-1, 1}) {
      std::vector<int> moved = firsts;
      moved[k] += step;
      const int next = k + 1 < moved.size() ? moved[k + 1] : s.model.n_layers;
      if (moved[k] <= moved[k - 1] || moved[k] >= next) continue;
      EXPECT_GE(WorstStage(c, moved), worst - 1e-12) << "cut " << k << " moved by " << step;
    }
  }
}

TEST(PipelineStagesTest, LayersPerStageOverridesTheBalance) {
  // 8 layers, pp=2 interleaved with 2 virtual stages: 4 stages of 2, looped over the
  // ranks, even with a vocabulary that would have shifted the balanced split.
  JobSpec s = Pipelined("debug", {"model.n_layers=8", "model.vocab_size=65536"}, 2, "interleaved_1f1b");
  s.parallelism.pp_layers_per_stage = 2;
  Result<std::vector<PipelineStage>> split = SplitPipelineStages(s);
  ASSERT_TRUE(split.ok()) << split.error().ToString();
  ExpectWellFormed(split.value(), s);
  EXPECT_THAT(Firsts(split.value()), ::testing::ElementsAre(0, 2, 4, 6));
  std::vector<int> ranks;
  for (const PipelineStage& st : split.value()) ranks.push_back(st.rank);
  EXPECT_THAT(ranks, ::testing::ElementsAre(0, 1, 0, 1));
  s.parallelism.pp_layers_per_stage = 0;
  EXPECT_NE(Firsts(SplitPipelineStages(s).value()), std::vector<int>({0, 2, 4, 6})) << "balanced, it differs";
}

TEST(PipelineStagesTest, ModelsTooSmallAndBadOverridesAreRefused) {
  JobSpec small = Pipelined("debug", {"model.n_layers=3"}, 4);
  Result<std::vector<PipelineStage>> r = SplitPipelineStages(small);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().field, "parallelism.pp");
  EXPECT_EQ(r.error().rule, "requires");
  EXPECT_EQ(r.error().message,
            "parallelism.pp=4 needs model.n_layers >= 4 pipeline stages (parallelism.pp=4 times 1 virtual stage a "
            "rank), got 3 (every stage holds at least one layer)");
  // Interleaved: 2 stages a rank by default.
  EXPECT_FALSE(SplitPipelineStages(Pipelined("debug", {"model.n_layers=3"}, 2, "interleaved_1f1b")).ok());
  EXPECT_TRUE(SplitPipelineStages(Pipelined("debug", {"model.n_layers=3"}, 3)).ok()) << "one layer a stage";

  JobSpec untiled = Pipelined("debug", {}, 2);
  untiled.parallelism.pp_layers_per_stage = 3;
  Result<std::vector<PipelineStage>> bad = SplitPipelineStages(untiled);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().field, "parallelism.pp_layers_per_stage");

  JobSpec zero = Pipelined("debug", {}, 0);
  EXPECT_EQ(SplitPipelineStages(zero).error().field, "parallelism.pp");
  JobSpec negative = Pipelined("debug", {}, 2);
  negative.parallelism.pp_virtual_stages = -1;
  EXPECT_EQ(SplitPipelineStages(negative).error().field, "parallelism.pp_virtual_stages");
}

}  // namespace
}  // namespace trainyard::spec
