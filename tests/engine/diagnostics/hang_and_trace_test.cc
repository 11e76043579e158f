// Real trainyard-rank processes on loopback: hang detection (a rank stalled by the test
// hook is named by its peer's watchdog, or reports its own step timeout; both exit 86
// with a Stall event and a flight-recorder dump) and profiler traces (a profiled step
// writes a Chrome trace holding the engine's ranges).
#include <signal.h>
#include <stdlib.h>

#include <fstream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/flight/artifact_file.h"
#include "tests/engine/parallel/rank_process.h"

namespace {

using nlohmann::json;
using ::testing::HasSubstr;
using trainyard::engine::testing::FreePort;
using trainyard::engine::testing::SpawnRank;
using trainyard::engine::testing::WaitExit;

constexpr int kStallExit = 86;

json Spec(int dp, int steps) {
  json spec = json::parse(R"({"job":{"name":"t","priority":0},
    "model":{"preset":"tiny","vocab_size":256,"dim":64,"n_layers":2,"n_dense_layers":1,
      "n_heads":4,"n_kv_heads":2,"ffn_hidden":128,"n_routed_experts":4,"top_k":2,
      "n_shared_experts":1,"expert_hidden":32,"score_func":"sigmoid","route_norm":true,
      "route_scale":1,"rope_theta":10000,"norm_eps":1e-05,"load_balance_coeff":0.001},
    "training":{"steps":10,"batch_size":4,"seq_len":32,"lr":0.003,"warmup_steps":2,
      "max_norm":1,"seed":"42","dataset":"synthetic","dataset_path":"","log_freq":1},
    "parallelism":{"dp":1,"tp":1,"ep":1,"collective_timeout_s":60}})");
  spec["training"]["steps"] = steps;
  spec["parallelism"]["dp"] = dp;
  return spec;
}

std::string MakeDir(const std::string& tag) {
  std::string tmpl = ::testing::TempDir() + tag + "_XXXXXX";
  EXPECT_NE(mkdtemp(tmpl.data()), nullptr);
  return tmpl;
}

std::string WriteSpec(const std::string& dir, const json& spec) {
  const std::string path = dir + "/spec.json";
  std::ofstream(path) << spec.dump();
  return path;
}

std::vector<json> ReadEvents(const std::string& path) {
  std::vector<json> events;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) events.push_back(json::parse(line));
  return events;
}

std::vector<json> Payloads(const std::vector<json>& events, const std::string& kind) {
  std::vector<json> out;
  for (const auto& e : events) {
    if (e.contains(kind)) out.push_back(e[kind]);
  }
  return out;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// The ArtifactRef must point at a file whose size and digest it states.
void ExpectArtifactMatchesFile(const json& a, const std::string& want_path) {
  const std::string uri = a["uri"];
  ASSERT_EQ(uri, "file://" + want_path);
  const std::string bytes = ReadAll(want_path);
  EXPECT_EQ(a["size_bytes"].get<int64_t>(), static_cast<int64_t>(bytes.size()));
  EXPECT_EQ(a["sha256"], trainyard::flight::Sha256Hex(bytes));
}

class TestStallEnv {
 public:
  TestStallEnv(int rank, int step) {
    setenv("TRAINYARD_TEST_STALL_RANK", std::to_string(rank).c_str(), 1);
    setenv("TRAINYARD_TEST_STALL_AT_STEP", std::to_string(step).c_str(), 1);
  }
  ~TestStallEnv() {
    unsetenv("TRAINYARD_TEST_STALL_RANK");
    unsetenv("TRAINYARD_TEST_STALL_AT_STEP");
  }
};

TEST(HangDetectionTest, PeerWatchdogNamesTheStalledRankInTheCollective) {
  const std::string dir = MakeDir("hang_coll");
  json spec = Spec(2, 6);
  spec["parallelism"]["collective_timeout_s"] = 2;  // step_timeout_s stays 0 (off)
  const std::string config = WriteSpec(dir, spec);
  const std::string run = dir + "/run";
  const int port = FreePort();
  pid_t r0, r1;
  {
    TestStallEnv env(1, 3);
    r0 = SpawnRank(config, 0, 2, port, dir + "/r0.jsonl", {"--run-dir", run});
    r1 = SpawnRank(config, 1, 2, port, dir + "/r1.jsonl", {"--run-dir", run});
  }
  EXPECT_EQ(WaitExit(r0), kStallExit);
  kill(r1, SIGKILL);  // it sleeps forever by design
  WaitExit(r1);

  const auto events = ReadEvents(dir + "/r0.jsonl");
  const auto stalls = Payloads(events, "stall");
  ASSERT_EQ(stalls.size(), 1u);
  const json& s = stalls[0];
  EXPECT_EQ(s["collective"], "world:allreduce");
  EXPECT_GE(s["collective_seq"].get<int64_t>(), 1);
  EXPECT_EQ(s["lagging_rank"], 1);
  EXPECT_EQ(s["waiting_ranks"], json::array({0}));
  EXPECT_EQ(s["step"], 3);
  EXPECT_GE(s["waited_s"].get<double>(), 2.0);
  EXPECT_THAT(s["message"].get<std::string>(), HasSubstr("lagging rank 1"));

  const auto artifacts = Payloads(events, "artifact");
  ASSERT_EQ(artifacts.size(), 1u);
  EXPECT_EQ(artifacts[0]["name"], "flight-a1-r0.json");
  EXPECT_EQ(artifacts[0]["kind"], "flight_recorder");
  char resolved[PATH_MAX];
  ASSERT_NE(realpath((run + "/artifacts").c_str(), resolved), nullptr);
  const std::string dump_path = std::string(resolved) + "/flight-a1-r0.json";
  ExpectArtifactMatchesFile(artifacts[0], dump_path);

  // The dump holds both rings; rank 0's newest entry is the collective in flight.
  const json dump = json::parse(ReadAll(dump_path));
  ASSERT_EQ(dump["rings"].size(), 2u);
  const json& ring0 = dump["rings"][0];
  EXPECT_EQ(ring0["rank"], 0);
  const json& last = ring0["entries"].back();
  EXPECT_EQ(last["in_flight"], true);
  EXPECT_EQ(last["group"], "world");
  EXPECT_EQ(last["op"], "allreduce");
  EXPECT_EQ(last["group_seq"], s["collective_seq"]);
  EXPECT_EQ(dump["rings"][1]["rank"], 1);
  EXPECT_LT(dump["rings"][1]["groups"][0]["entered"].get<int64_t>(), s["collective_seq"].get<int64_t>());
}

TEST(HangDetectionTest, LaggardWithoutALocalRingIsFoundThroughTheStore) {
  // Separate run folders stand for separate hosts: rank 0 cannot read rank 1's ring
  // and learns its progress from what rank 1 published in rank 0's TCPStore.
  const std::string dir = MakeDir("hang_store");
  json spec = Spec(2, 6);
  spec["parallelism"]["collective_timeout_s"] = 3;
  const std::string config = WriteSpec(dir, spec);
  const int port = FreePort();
  pid_t r0, r1;
  {
    TestStallEnv env(1, 3);
    r0 = SpawnRank(config, 0, 2, port, dir + "/r0.jsonl", {"--run-dir", dir + "/host0"});
    r1 = SpawnRank(config, 1, 2, port, dir + "/r1.jsonl", {"--run-dir", dir + "/host1"});
  }
  EXPECT_EQ(WaitExit(r0), kStallExit);
  kill(r1, SIGKILL);
  WaitExit(r1);
  const auto stalls = Payloads(ReadEvents(dir + "/r0.jsonl"), "stall");
  ASSERT_EQ(stalls.size(), 1u);
  EXPECT_EQ(stalls[0]["collective"], "world:allreduce");
  EXPECT_EQ(stalls[0]["lagging_rank"], 1);
  EXPECT_THAT(stalls[0]["message"].get<std::string>(), HasSubstr("TCPStore"));
  // The dump holds only the ring of rank 0's own folder.
  const json dump = json::parse(ReadAll(dir + "/host0/artifacts/flight-a1-r0.json"));
  EXPECT_EQ(dump["rings"].size(), 1u);
}

TEST(HangDetectionTest, StalledRankReportsItsOwnStepTimeout) {
  const std::string dir = MakeDir("hang_step");
  json spec = Spec(2, 6);
  spec["training"]["step_timeout_s"] = 1.5;
  spec["parallelism"]["collective_timeout_s"] = 120;
  const std::string config = WriteSpec(dir, spec);
  const std::string run = dir + "/run";
  const int port = FreePort();
  pid_t r0, r1;
  {
    TestStallEnv env(1, 2);
    r0 = SpawnRank(config, 0, 2, port, dir + "/r0.jsonl", {"--run-dir", run, "--attempt", "1"});
    r1 = SpawnRank(config, 1, 2, port, dir + "/r1.jsonl", {"--run-dir", run, "--attempt", "1"});
  }
  EXPECT_EQ(WaitExit(r1), kStallExit);
  kill(r0, SIGKILL);  // its collective lost its peer; how it ends is not this test's
  WaitExit(r0);

  const auto events = ReadEvents(dir + "/r1.jsonl");
  const auto stalls = Payloads(events, "stall");
  ASSERT_EQ(stalls.size(), 1u);
  EXPECT_EQ(stalls[0]["collective"], "");
  EXPECT_EQ(stalls[0]["collective_seq"], 0);
  EXPECT_EQ(stalls[0]["lagging_rank"], 1);
  EXPECT_EQ(stalls[0]["step"], 2);
  EXPECT_THAT(stalls[0]["message"].get<std::string>(), HasSubstr("no step progress"));
  const auto artifacts = Payloads(events, "artifact");
  ASSERT_EQ(artifacts.size(), 1u);
  EXPECT_EQ(artifacts[0]["name"], "flight-a1-r1.json");
}

TEST(HangDetectionTest, TestHookIsIgnoredAfterTheFirstAttempt) {
  const std::string dir = MakeDir("hang_retry");
  json spec = Spec(1, 3);
  spec["training"]["step_timeout_s"] = 1;
  const std::string config = WriteSpec(dir, spec);
  pid_t r0;
  {
    TestStallEnv env(0, 2);
    r0 = SpawnRank(config, 0, 1, FreePort(), dir + "/r0.jsonl", {"--run-dir", dir + "/run", "--attempt", "2"});
  }
  EXPECT_EQ(WaitExit(r0), 0);
  EXPECT_TRUE(Payloads(ReadEvents(dir + "/r0.jsonl"), "stall").empty());
}

TEST(ProfilerTraceTest, ProfiledStepWritesAChromeTraceWithEngineRanges) {
  const std::string dir = MakeDir("trace");
  json spec = Spec(2, 2);
  spec["compile"] = {{"backend", "jit"}};
  // freq 2, warmup 0, active 1: step 1 is profiled (step 3 would be next).
  spec["profiling"] = {{"enable", true}, {"freq", 2}, {"warmup", 0}, {"active", 1}};
  const std::string config = WriteSpec(dir, spec);
  const std::string run = dir + "/run";
  const int port = FreePort();
  pid_t r0 = SpawnRank(config, 0, 2, port, dir + "/r0.jsonl", {"--run-dir", run});
  pid_t r1 = SpawnRank(config, 1, 2, port, dir + "/r1.jsonl", {"--run-dir", run});
  ASSERT_EQ(WaitExit(r0), 0);
  ASSERT_EQ(WaitExit(r1), 0);

  const auto artifacts = Payloads(ReadEvents(dir + "/r0.jsonl"), "artifact");
  ASSERT_EQ(artifacts.size(), 1u);
  EXPECT_EQ(artifacts[0]["name"], "trace-a1-r0-s00000001.json");
  EXPECT_EQ(artifacts[0]["kind"], "trace");
  char resolved[PATH_MAX];
  ASSERT_NE(realpath((run + "/artifacts").c_str(), resolved), nullptr);
  const std::string path = std::string(resolved) + "/trace-a1-r0-s00000001.json";
  ExpectArtifactMatchesFile(artifacts[0], path);

  const json trace = json::parse(ReadAll(path));
  ASSERT_TRUE(trace.contains("traceEvents"));
  ASSERT_TRUE(trace["traceEvents"].is_array());
  std::vector<std::string> names;
  for (const auto& e : trace["traceEvents"]) {
    EXPECT_EQ(e["ph"], "X");
    EXPECT_EQ(e["pid"], 0);
    names.push_back(e["name"]);
  }
  auto has_prefix = [&](const std::string& prefix) {
    for (const auto& n : names) {
      if (n.rfind(prefix, 0) == 0) return true;
    }
    return false;
  };
  EXPECT_TRUE(has_prefix("region:attention#0"));
  EXPECT_TRUE(has_prefix("region:loss"));
  EXPECT_TRUE(has_prefix("compile"));
  EXPECT_TRUE(has_prefix("collective:world:allreduce#1"));
  EXPECT_TRUE(has_prefix("collective:dp0:allreduce#"));
  EXPECT_TRUE(has_prefix("trainyard::optimizer"));
  EXPECT_TRUE(has_prefix("trainyard::data"));
  // Only step 1 was profiled: a second window would have its own file.
  EXPECT_EQ(Payloads(ReadEvents(dir + "/r1.jsonl"), "artifact").size(), 1u);
}

}  // namespace
