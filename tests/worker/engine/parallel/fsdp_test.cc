// Sharded data parallelism (parallelism.dp_shard; worker/engine/parallel/fully_sharded.h)
// with real trainyard-rank processes on loopback, tiny model:
//   - dp_shard=2 against replicated dp=2: the same reduction, so the same losses and
//     final weights, bit for bit (the acceptance bound is 1e-6 relative); loading and
//     saving full weights around the shards;
//   - dp_shard with EP, TP, expert sharding and HSDP against one rank with the same
//     global batch, within 1e-5 relative over 20 steps;
//   - the parameter + gradient + optimizer bytes a rank keeps between steps, printed for
//     dp_shard 1, 2 and 4 and checked against the shapes of the saved weights;
//   - checkpoints: one written under dp_shard=2 resumes under replicated dp=2, tp=2 and
//     one rank with grad_accum_steps=2, and checkpoints written by those resume under
//     dp_shard=2 again, each continuing the uninterrupted run.
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "tests/worker/engine/rank_harness.h"
#include "worker/engine/checkpoint/checkpoint_layout.h"
#include "worker/engine/io/safetensors_file.h"

namespace trainyard::engine {
namespace {

namespace fs = std::filesystem;
using testing::FreePort;
using testing::LossesByStep;
using testing::ReadRankEvents;
using testing::SpawnRank;
using testing::WaitExit;

constexpr int kSteps = 20;

struct Layout {
  int dp = 1, tp = 1, ep = 1, dp_shard = 1;
  int batch = 4;  // per DP rank and micro-batch
  int accum = 1;
  int steps = kSteps;
  std::string ckdir;  // "": no checkpoints; else one every 5 steps
  std::string precision = "fp32";
  std::string Name() const {
    return "dp" + std::to_string(dp) + "_shard" + std::to_string(dp_shard) + "_tp" + std::to_string(tp) + "_ep" +
           std::to_string(ep) + "_b" + std::to_string(batch) + "_a" + std::to_string(accum);
  }
};

void PrintTo(const Layout& r, std::ostream* os) { *os << r.Name(); }

std::string Prefix() { return ::testing::TempDir() + "fsdp_" + std::to_string(::getpid()) + "_"; }

// Runs every rank of `r` to the end; returns rank 0's events.
std::vector<v1::Event> RunAll(const Layout& r, const std::string& tag, const std::vector<std::string>& extra = {}) {
  EngineConfig c = testing::TinySpec();
  c.training.steps = r.steps;
  c.training.batch_size = r.batch;
  c.training.grad_accum_steps = r.accum;
  c.parallelism.dp = r.dp;
  c.parallelism.tp = r.tp;
  c.parallelism.ep = r.ep;
  c.parallelism.dp_shard = r.dp_shard;
  c.training.mixed_precision = r.precision;
  c.parallelism.collective_timeout_s = 120;
  if (!r.ckdir.empty()) {
    c.checkpoint.interval = 5;
    c.checkpoint.dir = r.ckdir;
  }
  const std::string config = testing::WriteSpec(Prefix() + tag + ".json", c);
  const int world = r.dp * r.tp;
  const int port = FreePort();
  std::vector<pid_t> pids;
  for (int rank = 0; rank < world; ++rank) {
    pids.push_back(SpawnRank(config, rank, world, port, Prefix() + tag + "_r" + std::to_string(rank) + ".jsonl", extra));
  }
  for (int rank = 0; rank < world; ++rank) EXPECT_EQ(WaitExit(pids[rank]), 0) << tag << " rank " << rank;
  return ReadRankEvents(Prefix() + tag + "_r0.jsonl");
}

std::map<std::string, torch::Tensor> Weights(const std::string& path) {
  std::map<std::string, torch::Tensor> m;
  for (auto& [name, t] : ReadSafetensors(path)) m[name] = t;
  return m;
}

// The integer after "key=" in rank 0's "engine start:" line; -1 when absent.
int64_t StartField(const std::vector<v1::Event>& events, const std::string& key) {
  for (const v1::Event& e : events) {
    const std::string& m = e.log().message();
    if (!e.has_log() || m.rfind("engine start:", 0) != 0) continue;
    const size_t at = m.find(" " + key + "=");
    if (at == std::string::npos) return -1;
    return std::stoll(m.substr(at + key.size() + 2));
  }
  return -1;
}

void ExpectLossesNear(const std::map<int, double>& got, const std::map<int, double>& want, int from, double rel,
                      const std::string& what) {
  for (int s = from; s <= kSteps; ++s) {
    ASSERT_TRUE(got.count(s)) << what << " has no step " << s;
    ASSERT_TRUE(want.count(s)) << "the reference has no step " << s;
    EXPECT_NEAR(got.at(s), want.at(s), rel * std::abs(want.at(s))) << what << " step " << s;
  }
}

TEST(FsdpTest, ShardedMatchesReplicatedDataParallelBitForBit) {
  Layout replicated{2, 1, 1, 1};
  Layout sharded{2, 1, 1, 2};
  const std::string dir = Prefix();
  const auto want = LossesByStep(RunAll(replicated, "replicated", {"--save-final", dir + "replicated.safetensors"}));
  const auto got = LossesByStep(RunAll(sharded, "sharded", {"--save-final", dir + "sharded.safetensors"}));
  ASSERT_EQ(want.size(), size_t(kSteps));
  EXPECT_LT(want.at(kSteps), want.at(1) - 0.05);  // it trained
  ExpectLossesNear(got, want, 1, 1e-6, "dp_shard=2");
  for (int s = 1; s <= kSteps; ++s) EXPECT_EQ(got.at(s), want.at(s)) << "step " << s << " (bit for bit)";
  const auto a = Weights(dir + "replicated.safetensors");
  const auto b = Weights(dir + "sharded.safetensors");
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [name, w] : a) {
    ASSERT_TRUE(b.count(name)) << name;
    EXPECT_TRUE(torch::equal(b.at(name), w)) << name;
  }
}

// --load, --save-init and --save-final gather and reshard around the shards: a sharded
// run that loads a file writes it back unchanged and trains from it as replicated DP does.
TEST(FsdpTest, LoadsAndSavesFullWeights) {
  const std::string dir = Prefix();
  Layout replicated{2, 1, 1, 1};
  replicated.steps = 2;
  RunAll(replicated, "load_src", {"--save-final", dir + "load_src.safetensors"});
  const auto want = LossesByStep(RunAll(replicated, "load_replicated", {"--load", dir + "load_src.safetensors"}));
  Layout sharded{2, 1, 1, 2};
  sharded.steps = 2;
  const auto got = LossesByStep(RunAll(sharded, "load_sharded", {"--load", dir + "load_src.safetensors", "--save-init",
                                                               dir + "load_init.safetensors"}));
  ASSERT_EQ(want.size(), 2u);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got.at(1), want.at(1));
  EXPECT_EQ(got.at(2), want.at(2));
  const auto loaded = Weights(dir + "load_src.safetensors");
  const auto saved = Weights(dir + "load_init.safetensors");
  ASSERT_EQ(saved.size(), loaded.size());
  for (const auto& [name, w] : loaded) EXPECT_TRUE(torch::equal(saved.at(name), w)) << name;
}

// bf16 jobs all-gather bf16 and unpack into the fp32 parameters, which the regions
// round to bf16 again (exact; every weight a region uses is cast, norms and router
// included): the losses are replicated bf16 DP's, bit for bit.
TEST(FsdpTest, Bf16ShardedMatchesReplicatedBf16) {
  auto run = [](int shard) {
    Layout l{2, 1, 1, shard};
    l.precision = "bf16";
    return LossesByStep(RunAll(l, "bf16_s" + std::to_string(shard)));
  };
  const auto want = run(1);
  const auto got = run(2);
  ASSERT_EQ(got.size(), size_t(kSteps));
  ExpectLossesNear(got, want, 1, 0.0, "bf16 dp_shard=2");
}

// The prefetch (every unit's all-gather started at the step's start) against each
// unit's gather started when forward reaches it (TRAINYARD_FSDP_PREFETCH=0): the same
// transfers, so the same losses and weights bit for bit; rank 0 says which ran.
TEST(FsdpTest, PrefetchIsBitIdenticalToGatheringEachUnitWhenReached) {
  const std::string dir = Prefix();
  auto run = [&](bool prefetch) {
    const std::string tag = prefetch ? "prefetch" : "no_prefetch";
    ::setenv("TRAINYARD_FSDP_PREFETCH", prefetch ? "1" : "0", 1);
    Layout l{2, 1, 2, 2};
    l.steps = 6;
    const auto events = RunAll(l, tag, {"--save-final", dir + tag + ".safetensors"});
    ::unsetenv("TRAINYARD_FSDP_PREFETCH");
    std::string line;
    for (const auto& e : events) {
      if (e.has_log() && e.log().message().rfind("gradient reduction:", 0) == 0) line = e.log().message();
    }
    return std::make_tuple(LossesByStep(events), line, Weights(dir + tag + ".safetensors"));
  };
  const auto [with, with_line, with_weights] = run(true);
  const auto [without, without_line, without_weights] = run(false);
  ASSERT_EQ(with.size(), 6u);
  EXPECT_EQ(with, without);
  for (const auto& [name, w] : without_weights) EXPECT_TRUE(torch::equal(with_weights.at(name), w)) << name;
  EXPECT_NE(with_line.find("fsdp: dp_shard=2, 4 units, all-gathers started at the step's start"), std::string::npos)
      << with_line;
  EXPECT_NE(without_line.find("each unit's all-gather started when forward reaches it"), std::string::npos)
      << without_line;
}

class FsdpParityTest : public ::testing::TestWithParam<Layout> {};

TEST_P(FsdpParityTest, LossesMatchOneRankWithTheSameGlobalBatch) {
  const Layout r = GetParam();
  Layout one;
  one.batch = r.batch * r.dp;
  const auto want = LossesByStep(RunAll(one, "one_b" + std::to_string(one.batch)));
  const auto got = LossesByStep(RunAll(r, r.Name()));
  ASSERT_EQ(got.size(), size_t(kSteps));
  ExpectLossesNear(got, want, 1, 1e-5, r.Name());
  double worst = 0;
  for (const auto& [s, l] : want) worst = std::max(worst, std::abs(got.at(s) - l) / std::abs(l));
  std::cout << "[fsdp parity] " << r.Name() << " max relative loss diff against 1 rank: " << worst << std::endl;
}

INSTANTIATE_TEST_SUITE_P(TwoRanks, FsdpParityTest, ::testing::Values(Layout{2, 1, 2, 2}),
                         [](const auto& info) { return info.param.Name(); });
// dp_shard·tp; experts sharded over 2 ranks (ep=2 of 4 FSDP ranks); HSDP (2 replicas of 2).
INSTANTIATE_TEST_SUITE_P(FourRanks, FsdpParityTest,
                         ::testing::Values(Layout{2, 2, 1, 2}, Layout{4, 1, 2, 4, 2}, Layout{4, 1, 1, 2, 2}),
                         [](const auto& info) { return info.param.Name(); });

// Bytes of fp32 parameter, gradient and both AdamW moments rank 0 keeps for `weights`
// (full tensors: tp = ep = 1) with each sharded on dim 0 over `shards` ranks.
int64_t ExpectedStateBytes(const std::map<std::string, torch::Tensor>& weights, int64_t shards) {
  int64_t elements = 0;
  for (const auto& [name, w] : weights) {
    if (name.find("expert_bias") != std::string::npos) continue;  // a buffer, not a parameter
    const int64_t rows = w.size(0);
    elements += (rows + shards - 1) / shards * (w.numel() / rows);
  }
  return 16 * elements;
}

TEST(FsdpMemoryTest, StateBytesPerRankShrinkWithTheShardDegree) {
  const std::string dir = Prefix();
  std::map<int, int64_t> at_dp2, at_dp4;
  std::map<std::string, torch::Tensor> weights;
  for (int shard : {1, 2}) {
    Layout r{2, 1, 1, shard};
    r.steps = 1;
    const std::string tag = "mem_dp2_s" + std::to_string(shard);
    const auto events = RunAll(r, tag, {"--save-final", dir + tag + ".safetensors"});
    at_dp2[shard] = StartField(events, "state_bytes_per_rank");
    weights = Weights(dir + tag + ".safetensors");
    EXPECT_EQ(at_dp2[shard], ExpectedStateBytes(weights, shard)) << "dp=2 dp_shard=" << shard;
  }
  for (int shard : {1, 2, 4}) {
    Layout r{4, 1, 1, shard};
    r.steps = 1;
    r.batch = 2;
    at_dp4[shard] = StartField(RunAll(r, "mem_dp4_s" + std::to_string(shard)), "state_bytes_per_rank");
    EXPECT_EQ(at_dp4[shard], ExpectedStateBytes(weights, shard)) << "dp=4 dp_shard=" << shard;
    std::cout << "[fsdp memory] dp=4 dp_shard=" << shard << ": parameter + gradient + optimizer bytes per rank "
              << at_dp4[shard] << std::endl;
  }
  std::cout << "[fsdp memory] dp=2: dp_shard=2 keeps " << at_dp2[2] << " bytes per rank, replicated "
            << at_dp2[1] << " (" << static_cast<double>(at_dp2[2]) / at_dp2[1] << "x)" << std::endl;
  EXPECT_LE(static_cast<double>(at_dp2[2]), 0.55 * static_cast<double>(at_dp2[1]));
  EXPECT_LE(static_cast<double>(at_dp4[4]), 0.3 * static_cast<double>(at_dp4[1]));
}

// The dp_shard=2 run with a checkpoint every 5 steps, and resumes of it across layouts.
class FsdpCheckpointTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = Prefix() + "sharded_ck";
    fs::remove_all(root_);
    Layout r{2, 1, 1, 2};
    r.ckdir = root_;
    losses_ = LossesByStep(RunAll(r, "sharded_ref"));
  }
  static std::string At(const std::string& root, int step, int attempt) {
    return (fs::path(root) / CheckpointDirName(step, attempt)).string();
  }
  // Resumes `r` from the reference's step 10 (writing its own checkpoints), checks it
  // against the reference, then resumes dp_shard=2 from its step 15 and checks that.
  void RoundTrip(Layout r, const std::string& tag, double rel) {
    r.ckdir = Prefix() + tag + "_ck";
    fs::remove_all(r.ckdir);
    const auto there = LossesByStep(RunAll(r, tag, {"--resume", At(root_, 10, 1), "--attempt", "2"}));
    EXPECT_EQ(there.begin()->first, 11) << tag;
    ExpectLossesNear(there, losses_, 11, rel, tag + " from dp_shard=2");
    Layout back{2, 1, 1, 2};
    const auto home = LossesByStep(RunAll(back, tag + "_back", {"--resume", At(r.ckdir, 15, 2)}));
    EXPECT_EQ(home.begin()->first, 16) << tag;
    ExpectLossesNear(home, losses_, 16, rel, "dp_shard=2 from " + tag);
  }

  static std::string root_;
  static std::map<int, double> losses_;
};
std::string FsdpCheckpointTest::root_;
std::map<int, double> FsdpCheckpointTest::losses_;

TEST_F(FsdpCheckpointTest, RoundTripsThroughReplicatedDataParallel) {
  ASSERT_EQ(losses_.size(), size_t(kSteps));
  RoundTrip(Layout{2, 1, 1, 1}, "replicated", 0.0);  // the same sums: bit for bit
}

TEST_F(FsdpCheckpointTest, RoundTripsThroughTensorParallel) {
  Layout r{1, 2, 1, 1};
  r.batch = 8;
  RoundTrip(r, "tp2", 1e-5);
}

TEST_F(FsdpCheckpointTest, RoundTripsThroughOneRankWithGradientAccumulation) {
  Layout r{1, 1, 1, 1};
  r.accum = 2;
  RoundTrip(r, "one_a2", 1e-5);
}

}  // namespace
}  // namespace trainyard::engine
