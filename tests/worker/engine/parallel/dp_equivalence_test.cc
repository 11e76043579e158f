// Real trainyard-rank processes on loopback: a 2-rank data-parallel run must give the
// same per-step losses as one rank holding the whole global batch.
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/worker/engine/rank_harness.h"

namespace trainyard::engine {
namespace {

using testing::FreePort;
using testing::Losses;
using testing::ReadRankEvents;
using testing::SpawnRank;
using testing::WaitExit;

std::string Spec(const std::string& name, int dp, int batch, int steps) {
  EngineConfig c = testing::TinySpec();
  c.training.batch_size = batch;
  c.training.steps = steps;
  c.parallelism.dp = dp;
  return testing::WriteSpec(::testing::TempDir() + name, c);
}

TEST(DataParallelTest, TwoRanksMatchOneRankWithTheGlobalBatch) {
  const int steps = 10;
  const std::string dir = ::testing::TempDir();
  const std::string one = Spec("dp1.json", 1, 8, steps);
  const std::string two = Spec("dp2.json", 2, 4, steps);

  pid_t single = SpawnRank(one, 0, 1, FreePort(), dir + "dp1_r0.jsonl", {"--attempt", "2"});
  ASSERT_EQ(WaitExit(single), 0);
  const int port = FreePort();
  pid_t r0 = SpawnRank(two, 0, 2, port, dir + "dp2_r0.jsonl", {"--attempt", "2"});
  pid_t r1 = SpawnRank(two, 1, 2, port, dir + "dp2_r1.jsonl", {"--attempt", "2"});
  ASSERT_EQ(WaitExit(r0), 0);
  ASSERT_EQ(WaitExit(r1), 0);

  const auto ev1 = ReadRankEvents(dir + "dp1_r0.jsonl");
  const auto ev2 = ReadRankEvents(dir + "dp2_r0.jsonl");
  const auto loss1 = Losses(ev1), loss2 = Losses(ev2);
  ASSERT_EQ(loss1.size(), size_t(steps));
  ASSERT_EQ(loss2.size(), size_t(steps));
  for (int i = 0; i < steps; ++i) {
    EXPECT_NEAR(loss2[i], loss1[i], 1e-4 * std::abs(loss1[i])) << "step " << i + 1;
  }
  EXPECT_LT(loss1.back(), loss1.front() - 0.05);

  // Rank 1 reports no metrics; every line of rank 0 is an event with a time, and the
  // rank stamps none of what its reader stamps (rank, attempt, source_seq).
  EXPECT_TRUE(Losses(ReadRankEvents(dir + "dp2_r1.jsonl")).empty());
  std::ifstream raw(dir + "dp2_r0.jsonl");
  size_t lines = 0;
  for (std::string line; std::getline(raw, line); ++lines) {
    for (const char* stamped : {"\"rank\"", "\"attempt\"", "\"source_seq\""}) {
      EXPECT_EQ(line.find(stamped), std::string::npos) << line;
    }
  }
  EXPECT_EQ(lines, ev2.size());
  for (const v1::Event& e : ev2) EXPECT_TRUE(e.has_time()) << e.ShortDebugString();
  // The last step's metrics (compile SUMMARY events follow the last step).
  v1::StepMetrics last;
  for (const auto& e : ev2) {
    if (e.has_step_metrics()) last = e.step_metrics();
  }
  EXPECT_EQ(last.step(), steps);
  int64_t load = 0;
  for (int64_t v : last.expert_load()) load += v;
  EXPECT_EQ(load, 8 * 32 * 2);  // global tokens x top_k, one MoE layer
  EXPECT_GE(last.imbalance(), 1.0);
}

TEST(DataParallelTest, BadConfigEndsWithAnErrorEventAndExitOne) {
  // parallelism.ep=3 passes no rule check on purpose here: the rank refuses it itself.
  EngineConfig c = testing::TinySpec();
  c.training.steps = 2;
  const std::string path = ::testing::TempDir() + "bad.json";
  std::string json = spec::ToJson(c);
  const std::string from = "\"ep\":1";
  ASSERT_NE(json.find(from), std::string::npos) << json;
  json.replace(json.find(from), from.size(), "\"ep\":3");
  std::ofstream(path) << json;
  const std::string out = ::testing::TempDir() + "bad_r0.jsonl";
  pid_t pid = SpawnRank(path, 0, 1, FreePort(), out, {"--attempt", "2"});
  EXPECT_EQ(WaitExit(pid), 1);
  const auto events = ReadRankEvents(out);
  ASSERT_FALSE(events.empty());
  ASSERT_TRUE(events.back().has_log());
  EXPECT_EQ(events.back().log().level(), "error");
  EXPECT_NE(events.back().log().message().find("parallelism.ep=3 must divide model.n_routed_experts=4"),
            std::string::npos);
}

}  // namespace
}  // namespace trainyard::engine
