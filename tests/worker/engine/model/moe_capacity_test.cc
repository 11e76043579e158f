// Token dropping (model.capacity_factor) against references written here: the kept
// assignments chosen by a plain loop (per sequence and expert, the highest gates), the
// MoE output and gradients against a dense all-experts reference masked by them, and
// the dropless MoE and model bit for bit where the capacity drops nothing.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <map>
#include <tuple>
#include <utility>
#include <vector>

#include "tests/worker/engine/model/small_moe.h"
#include "tests/worker/engine/trainer_harness.h"
#include "worker/engine/base/host_sync.h"
#include "worker/engine/config/engine_config.h"
#include "worker/engine/model/moe/moe_layer.h"
#include "worker/engine/model/transformer_model.h"

namespace trainyard::engine {
namespace {

using testing::AllExpertsReference;
using testing::GateByHand;
using testing::HandGates;
using testing::OneRankTrainer;
using testing::RandomInitSmallMoE;
using testing::SmallMoEConfig;

// The routing computed plainly: per token the top-k (GateByHand), then per sequence and expert the `capacity` largest
// gates kept (a sort of (gate, token) pairs). kept[t][e] is 1 for a kept assignment, 0 otherwise.
struct HandRouting {
  torch::Tensor gates;                 // [n, E], zero off the top-k, with grad
  std::vector<std::vector<int>> kept;  // [n][E]
  std::vector<int64_t> routed;         // per expert, before drops
  int64_t dropped = 0;
  int max_group_load = 0;  // most assignments one expert got in one sequence
};

HandRouting RouteCapacityByHand(MoE& moe, const torch::Tensor& x, const ModelConfig& c, int64_t seq, int64_t capacity) {
  const int64_t n = x.size(0), experts = c.n_routed_experts;
  const HandGates top = GateByHand(moe, x, c);
  const torch::Tensor& mask = top.mask;
  HandRouting r;
  r.gates = top.gates;
  r.kept.assign(n, std::vector<int>(experts, 0));
  r.routed.assign(experts, 0);
  for (int64_t first = 0; first < n; first += seq) {
    for (int64_t e = 0; e < experts; ++e) {
      std::vector<std::pair<float, int64_t>> chosen;
      for (int64_t t = first; t < first + seq; ++t) {
        if (mask[t][e].item<float>() > 0) chosen.emplace_back(r.gates[t][e].item<float>(), t);
      }
      std::sort(chosen.begin(), chosen.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
      r.routed[e] += static_cast<int64_t>(chosen.size());
      r.max_group_load = std::max(r.max_group_load, static_cast<int>(chosen.size()));
      for (size_t i = 0; i < chosen.size(); ++i) {
        if (static_cast<int64_t>(i) < capacity) {
          r.kept[chosen[i].second][e] = 1;
        } else {
          ++r.dropped;
        }
      }
    }
  }
  return r;
}

// Every expert on every token, weighted by the kept gates, plus the shared expert.
torch::Tensor MaskedCapacityReference(MoE& moe, const torch::Tensor& x, const HandRouting& r) {
  std::vector<float> flat;
  for (const auto& row : r.kept) flat.insert(flat.end(), row.begin(), row.end());
  auto keep = torch::tensor(flat).view(r.gates.sizes());
  return AllExpertsReference(moe, x, r.gates * keep);
}

TEST(ExpertCapacityTest, CeilOfTheBalancedShareTimesTheFactorAtMostTheSequence) {
  // ceil(s·k/E·f), worked by hand.
  EXPECT_EQ(regions::ExpertCapacity(6, 2, 4, 0.5), 2);    // 3·0.5 = 1.5
  EXPECT_EQ(regions::ExpertCapacity(6, 2, 4, 1.0), 3);    // 3
  EXPECT_EQ(regions::ExpertCapacity(6, 2, 4, 1.25), 4);   // 3.75
  EXPECT_EQ(regions::ExpertCapacity(6, 2, 4, 2.0), 6);    // 6 = s
  EXPECT_EQ(regions::ExpertCapacity(6, 2, 4, 100.0), 6);  // never more than s
  EXPECT_EQ(regions::ExpertCapacity(6, 2, 4, 1e-9), 1);   // never less than 1
  EXPECT_EQ(regions::ExpertCapacity(4096, 8, 256, 1.0), 128);
}

class MoECapacityTest : public ::testing::TestWithParam<std::string> {};

TEST_P(MoECapacityTest, KeptAssignmentsOutputAndGradientsMatchAMaskedReference) {
  const ModelConfig c = SmallMoEConfig(GetParam(), 0.5);
  const int64_t batch = 3, seq = 6, capacity = 2;  // ceil(6·2/4 · 0.5)
  MoE moe(c);
  RandomInitSmallMoE(moe, 5);
  auto x = torch::randn({batch, seq, c.dim});
  auto target = torch::randn({batch, seq, c.dim});

  MoEOutput got = moe(x);
  ((got.out - target).pow(2)).sum().backward();
  std::vector<torch::Tensor> grads;
  for (auto& p : moe->parameters()) grads.push_back(p.grad().clone());
  moe->zero_grad();

  const auto flat = x.reshape({-1, c.dim});
  HandRouting r = RouteCapacityByHand(moe, flat, c, seq, capacity);
  ASSERT_GT(r.dropped, 0) << "the case must drop something";
  ASSERT_TRUE(got.dropped.defined());
  EXPECT_EQ(got.dropped.item<int64_t>(), r.dropped);
  // The load-balance counts are the routing decision, before drops.
  std::vector<int64_t> routed(got.tokens_per_expert.data_ptr<int64_t>(),
                              got.tokens_per_expert.data_ptr<int64_t>() + c.n_routed_experts);
  EXPECT_EQ(routed, r.routed);

  auto ref = MaskedCapacityReference(moe, flat, r).view(x.sizes());
  ((ref - target).pow(2)).sum().backward();
  EXPECT_TRUE(torch::allclose(got.out, ref, 1e-4, 1e-5)) << (got.out - ref).abs().max();
  auto params = moe->parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    ASSERT_TRUE(params[i].grad().defined());
    EXPECT_TRUE(torch::allclose(grads[i], params[i].grad(), 1e-4, 1e-5)) << "param " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(ScoreFuncs, MoECapacityTest, ::testing::Values("sigmoid", "softmax"));

TEST(MoECapacityRoutingTest, TheRouterSortsDroppedRowsLastWithZeroGates) {
  const ModelConfig c = SmallMoEConfig("sigmoid", 0.5);
  MoE moe(c);
  RandomInitSmallMoE(moe, 7);
  torch::NoGradGuard g;
  auto x = torch::randn({2, 6, c.dim});
  auto routed = moe->router_fn()({x, moe->expert_bias}, {moe->router->gate->weight});
  ASSERT_EQ(routed.size(), 5u);
  const int64_t kept = routed[4].sum().item<int64_t>();
  const int64_t rows = routed[0].size(0);
  HandRouting r = RouteCapacityByHand(moe, x.reshape({-1, c.dim}), c, 6, 2);
  EXPECT_EQ(rows - kept, r.dropped);
  // Kept per expert, from the hand routing.
  for (int64_t e = 0; e < c.n_routed_experts; ++e) {
    int64_t want = 0;
    for (const auto& row : r.kept) want += row[e];
    EXPECT_EQ(routed[4][e].item<int64_t>(), want) << "expert " << e;
  }
  EXPECT_TRUE(routed[1].narrow(0, kept, rows - kept).eq(0).all().item<bool>());
  EXPECT_TRUE(routed[1].narrow(0, 0, kept).gt(0).all().item<bool>());
}

// A capacity of a whole sequence (factor >= E/k) takes the dropless path: bit for bit,
// gradients included. One just above the busiest expert's load runs the dropping path
// and drops nothing: the same output bit for bit (the gradients sum in another order).
TEST(MoECapacityRoutingTest, ACapacityThatDropsNothingMatchesDropless) {
  const int64_t batch = 3, seq = 10;
  torch::manual_seed(17);
  auto x = torch::randn({batch, seq, 8});
  // No bias: the test's bias puts expert 0 in every token's top-2, a full sequence.
  auto init = [](MoE& moe) {
    RandomInitSmallMoE(moe, 11);
    moe->expert_bias.zero_();
  };
  // The most one expert gets from one sequence, counted by hand on the dropless routing.
  MoE probe(SmallMoEConfig());
  init(probe);
  const int load = RouteCapacityByHand(probe, x.reshape({-1, 8}), SmallMoEConfig(), seq, seq).max_group_load;
  ASSERT_LT(load, seq) << "the capacity must be below the sequence, so the dropping path runs";
  // ceil(10·2/4 · f) = load: f = (load − 0.5)/5.
  const double just_enough = (load - 0.5) / 5.0;
  for (const double f : {just_enough, 2.0, 100.0}) {
    MoE dropless(SmallMoEConfig()), capped(SmallMoEConfig("sigmoid", f));
    init(dropless);
    init(capped);
    auto a = dropless(x), b = capped(x);
    EXPECT_TRUE(torch::equal(a.out, b.out)) << "factor " << f;
    EXPECT_TRUE(torch::equal(a.tokens_per_expert, b.tokens_per_expert));
    EXPECT_EQ(b.dropped.defined(), f == just_enough) << "factor " << f;
    if (b.dropped.defined()) EXPECT_EQ(b.dropped.item<int64_t>(), 0);
    a.out.pow(2).sum().backward();
    b.out.pow(2).sum().backward();
    auto pa = dropless->parameters(), pb = capped->parameters();
    for (size_t i = 0; i < pa.size(); ++i) {
      if (f == just_enough) {
        EXPECT_TRUE(torch::allclose(pa[i].grad(), pb[i].grad(), 1e-5, 1e-7)) << "param " << i;
      } else {
        EXPECT_TRUE(torch::equal(pa[i].grad(), pb[i].grad())) << "factor " << f << " param " << i;
      }
    }
  }
}

// Capacity counts per sequence: the MoE over a batch equals the MoE over each of its
// samples alone (what DP, FSDP and gradient accumulation split), drops included.
TEST(MoECapacityRoutingTest, DropsDependOnTheSequenceNotTheBatchItSitsIn) {
  const ModelConfig c = SmallMoEConfig("sigmoid", 0.5);
  MoE moe(c);
  RandomInitSmallMoE(moe, 13);
  torch::NoGradGuard g;
  auto x = torch::randn({4, 6, c.dim});
  MoEOutput whole = moe(x);
  int64_t dropped = 0;
  for (int64_t b = 0; b < 4; ++b) {
    MoEOutput one = moe(x.narrow(0, b, 1));
    EXPECT_TRUE(torch::allclose(one.out, whole.out.narrow(0, b, 1), 1e-5, 1e-6)) << "sample " << b;
    dropped += one.dropped.item<int64_t>();
  }
  EXPECT_GT(dropped, 0);
  EXPECT_EQ(whole.dropped.item<int64_t>(), dropped);
}

// The whole model: a factor that keeps a whole sequence gives the dropless loss and
// gradients bit for bit, and a small one reports its drops.
TEST(ModelCapacityTest, LargeFactorIsBitIdenticalToDroplessAndASmallOneDrops) {
  ModelConfig c = TinyEngineConfig().model;
  torch::manual_seed(3);
  auto tokens = torch::randint(c.vocab_size, {2, 16}, torch::kInt64);
  auto targets = torch::randint(c.vocab_size, {2, 16}, torch::kInt64);
  auto run = [&](double factor) {
    ModelConfig m = c;
    m.capacity_factor = factor;
    TransformerModel model(m, 16);
    model->InitWeights(7);
    ModelOutput out = model(tokens, targets);
    out.loss.backward();
    std::vector<torch::Tensor> grads;
    for (auto& p : model->parameters()) grads.push_back(p.grad().clone());
    return std::make_tuple(out.loss.detach(), grads, out.dropped_tokens.item<int64_t>());
  };
  auto [loss0, grads0, dropped0] = run(0);

  auto [loss1, grads1, dropped1] = run(double(c.n_routed_experts) / c.top_k);  // capacity = seq
  EXPECT_EQ(dropped0, 0);
  EXPECT_EQ(dropped1, 0);
  EXPECT_TRUE(torch::equal(loss0, loss1)) << loss0.item<double>() << " vs " << loss1.item<double>();
  ASSERT_EQ(grads0.size(), grads1.size());
  for (size_t i = 0; i < grads0.size(); ++i) EXPECT_TRUE(torch::equal(grads0[i], grads1[i])) << "param " << i;
  auto [loss2, grads2, dropped2] = run(0.25);
  EXPECT_GT(dropped2, 0);
  EXPECT_FALSE(torch::equal(loss0, loss2));
}

// Trainer steps with a capacity (eager fp32, and the jit backend in bf16): the drop
// adds no host read outside the declared sites, the step metrics carry the dropped
// count, and at most what was routed is dropped.
void ExpectStepsDropWithoutHostReads(EngineConfig c) {
  c.model.capacity_factor = 0.5;
  OneRankTrainer trainer(c);
  trainer.Step(1);  // the first step traces and probes its regions
  UndeclaredHostReads watch;
  for (int s = 2; s < 5; ++s) {
    const v1::StepMetrics m = trainer.Step(s);
    int64_t routed = 0;
    for (int64_t n : m.expert_load()) routed += n;
    // tiny: batch 4 of 32 tokens, top-2, one MoE layer: 256 assignments, all in the load.
    EXPECT_EQ(routed, int64_t{c.training.batch_size} * c.training.seq_len * c.model.top_k * c.model.n_moe_layers());
    EXPECT_GT(m.dropped_tokens(), 0) << "step " << s;
    EXPECT_LT(m.dropped_tokens(), routed) << "step " << s;
  }
  EXPECT_EQ(watch.Counts(), (std::map<std::string, int64_t>{})) << "a host read outside a HostRead scope";
}

TEST(TrainerCapacityTest, StepsReportDropsAndReadTheHostOnlyAtDeclaredSites) {
  ExpectStepsDropWithoutHostReads(TinyEngineConfig());
}

TEST(TrainerCapacityTest, SoDoesAJitCompiledBf16Step) {
  EngineConfig c = TinyEngineConfig();
  c.compile.backend = "jit";
  c.training.mixed_precision = "bf16";
  ExpectStepsDropWithoutHostReads(c);
}

TEST(TrainerCapacityTest, SoDoesAStepOfWholeBlockRegions) {
  EngineConfig c = TinyEngineConfig();
  c.compile.regions = "model";
  ExpectStepsDropWithoutHostReads(c);
}

TEST(TrainerCapacityTest, ADroplessStepReportsNoDrops) {
  EngineConfig c = TinyEngineConfig();
  OneRankTrainer trainer(c);
  EXPECT_EQ(trainer.Step(1).dropped_tokens(), 0);
}

}  // namespace
}  // namespace trainyard::engine
