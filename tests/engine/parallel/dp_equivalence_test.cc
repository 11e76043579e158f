// Real trainyard-rank processes on loopback: a 2-rank data-parallel run must give the
// same per-step losses as one rank holding the whole global batch.
#include <fcntl.h>
#include <netinet/in.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/engine/parallel/rank_process.h"


namespace {

using nlohmann::json;
using trainyard::engine::testing::FreePort;
using trainyard::engine::testing::SpawnRank;
using trainyard::engine::testing::WaitExit;

json TinySpec(int dp, int batch, int steps) {
  json spec = json::parse(R"({"job":{"name":"t","priority":0},
    "model":{"preset":"tiny","vocab_size":256,"dim":64,"n_layers":2,"n_dense_layers":1,
      "n_heads":4,"n_kv_heads":2,"ffn_hidden":128,"n_routed_experts":4,"top_k":2,
      "n_shared_experts":1,"expert_hidden":32,"score_func":"sigmoid","route_norm":true,
      "route_scale":1,"rope_theta":10000,"norm_eps":1e-05,"load_balance_coeff":0.001},
    "training":{"steps":10,"batch_size":4,"seq_len":32,"lr":0.003,"warmup_steps":2,
      "max_norm":1,"seed":"42","dataset":"synthetic","dataset_path":"","log_freq":1},
    "parallelism":{"dp":1,"tp":1,"ep":1,"collective_timeout_s":60}})");
  spec["training"]["batch_size"] = batch;
  spec["training"]["steps"] = steps;
  spec["parallelism"]["dp"] = dp;
  return spec;
}

std::vector<json> ReadEvents(const std::string& path) {
  std::vector<json> events;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) events.push_back(json::parse(line));  // throws on non-JSON
  return events;
}

std::vector<double> Losses(const std::vector<json>& events) {
  std::vector<double> losses;
  for (const auto& e : events) {
    if (e.contains("step_metrics")) losses.push_back(e["step_metrics"]["loss"].get<double>());
  }
  return losses;
}

std::string WriteSpec(const std::string& name, const json& spec) {
  const std::string path = ::testing::TempDir() + name;
  std::ofstream(path) << spec.dump();
  return path;
}

TEST(DataParallelTest, TwoRanksMatchOneRankWithTheGlobalBatch) {
  const int steps = 10;
  const std::string dir = ::testing::TempDir();
  const std::string one = WriteSpec("dp1.json", TinySpec(1, 8, steps));
  const std::string two = WriteSpec("dp2.json", TinySpec(2, 4, steps));

  pid_t single = SpawnRank(one, 0, 1, FreePort(), dir + "dp1_r0.jsonl", {"--attempt", "2"});
  ASSERT_EQ(WaitExit(single), 0);
  const int port = FreePort();
  pid_t r0 = SpawnRank(two, 0, 2, port, dir + "dp2_r0.jsonl", {"--attempt", "2"});
  pid_t r1 = SpawnRank(two, 1, 2, port, dir + "dp2_r1.jsonl", {"--attempt", "2"});
  ASSERT_EQ(WaitExit(r0), 0);
  ASSERT_EQ(WaitExit(r1), 0);

  const auto ev1 = ReadEvents(dir + "dp1_r0.jsonl");
  const auto ev2 = ReadEvents(dir + "dp2_r0.jsonl");
  const auto loss1 = Losses(ev1), loss2 = Losses(ev2);
  ASSERT_EQ(loss1.size(), size_t(steps));
  ASSERT_EQ(loss2.size(), size_t(steps));
  for (int i = 0; i < steps; ++i) {
    EXPECT_NEAR(loss2[i], loss1[i], 1e-4 * std::abs(loss1[i])) << "step " << i + 1;
  }
  EXPECT_LT(loss1.back(), loss1.front() - 0.05);

  // Rank 1 reports no metrics; events are numbered from 1 and echo rank and attempt.
  EXPECT_TRUE(Losses(ReadEvents(dir + "dp2_r1.jsonl")).empty());
  for (size_t i = 0; i < ev2.size(); ++i) {
    EXPECT_EQ(ev2[i]["source_seq"], i + 1);
    EXPECT_EQ(ev2[i]["rank"], 0);
    EXPECT_EQ(ev2[i]["attempt"], 2);
  }
  // The last step's metrics (compile SUMMARY events follow the last step).
  json last;
  for (const auto& e : ev2) {
    if (e.contains("step_metrics")) last = e["step_metrics"];
  }
  EXPECT_EQ(last["step"], steps);
  int64_t load = 0;
  for (const auto& v : last["expert_load"]) load += v.get<int64_t>();
  EXPECT_EQ(load, 8 * 32 * 2);  // global tokens x top_k, one MoE layer
  EXPECT_GE(last["imbalance"].get<double>(), 1.0);
}

TEST(DataParallelTest, BadConfigEndsWithAnErrorEventAndExitOne) {
  json spec = TinySpec(1, 4, 2);
  spec["parallelism"]["ep"] = 3;
  const std::string out = ::testing::TempDir() + "bad_r0.jsonl";
  pid_t pid = SpawnRank(WriteSpec("bad.json", spec), 0, 1, FreePort(), out, {"--attempt", "2"});
  EXPECT_EQ(WaitExit(pid), 1);
  const auto events = ReadEvents(out);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back()["log"]["level"], "error");
  EXPECT_NE(events.back()["log"]["message"].get<std::string>().find("parallelism.ep=3 must divide model.n_routed_experts=4"), std::string::npos);
}

}  // namespace
