// Real trainyard-rank processes on loopback: hang detection (a rank stalled by the test
// hook is named by its peer's watchdog, or reports its own step timeout; both exit 86
// with a Stall event and a flight-recorder dump) and profiler traces (a profiled step
// writes kineto's Chrome trace, holding the ATen operators and the engine's ranges).
#include <signal.h>
#include <stdlib.h>

#include <fstream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/base/sha256.h"
#include "tests/worker/engine/rank_harness.h"
#include "tests/support/files.h"

namespace trainyard::engine {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;
using testing::FreePort;
using testing::ReadRankEvents;
using testing::SpawnRank;
using testing::WaitExit;

constexpr int kStallExit = 86;

EngineConfig Spec(int dp, int steps) {
  EngineConfig c = testing::TinySpec();
  c.training.steps = steps;
  c.parallelism.dp = dp;
  return c;
}

std::string MakeDir(const std::string& tag) {
  std::string tmpl = ::testing::TempDir() + tag + "_XXXXXX";
  EXPECT_NE(mkdtemp(tmpl.data()), nullptr);
  return tmpl;
}

std::string WriteSpec(const std::string& dir, const EngineConfig& spec) {
  return testing::WriteSpec(dir + "/spec.json", spec);
}

std::vector<v1::Stall> Stalls(const std::vector<v1::Event>& events) {
  std::vector<v1::Stall> out;
  for (const auto& e : events) {
    if (e.has_stall()) out.push_back(e.stall());
  }
  return out;
}

std::vector<v1::ArtifactRef> Artifacts(const std::vector<v1::Event>& events) {
  std::vector<v1::ArtifactRef> out;
  for (const auto& e : events) {
    if (e.has_artifact()) out.push_back(e.artifact());
  }
  return out;
}

// The ArtifactRef must point at a file whose size and digest it states.
void ExpectArtifactMatchesFile(const v1::ArtifactRef& a, const std::string& want_path) {
  ASSERT_EQ(a.uri(), "file://" + want_path);
  const std::string bytes = trainyard::testing::ReadFileOrEmpty(want_path);
  EXPECT_EQ(a.size_bytes(), static_cast<int64_t>(bytes.size()));
  EXPECT_EQ(a.sha256(), Sha256Hex(bytes));
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
  EngineConfig spec = Spec(2, 6);
  spec.parallelism.collective_timeout_s = 2;  // step_timeout_s stays 0 (off)
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

  const auto events = ReadRankEvents(dir + "/r0.jsonl");
  const auto stalls = Stalls(events);
  ASSERT_EQ(stalls.size(), 1u);
  const v1::Stall& s = stalls[0];
  // Rank 0 ends its backward and waits first for its gradient buckets: the dense ones
  // on the DP group (started during backward, parallelism.md "Overlap"), whose first
  // wait is where it stands when rank 1 never comes.
  EXPECT_EQ(s.collective(), "dp0:allreduce");
  EXPECT_GE(s.collective_seq(), 1);
  EXPECT_EQ(s.lagging_rank(), 1);
  EXPECT_EQ(std::vector<int>(s.waiting_ranks().begin(), s.waiting_ranks().end()), std::vector<int>{0});
  EXPECT_EQ(s.step(), 3);
  EXPECT_GE(s.waited_s(), 2.0);
  EXPECT_THAT(s.message(), HasSubstr("lagging rank 1"));

  const auto artifacts = Artifacts(events);
  ASSERT_EQ(artifacts.size(), 1u);
  EXPECT_EQ(artifacts[0].name(), "flight-a1-r0.json");
  EXPECT_EQ(artifacts[0].kind(), "flight_recorder");
  char resolved[PATH_MAX];
  ASSERT_NE(realpath((run + "/artifacts").c_str(), resolved), nullptr);
  const std::string dump_path = std::string(resolved) + "/flight-a1-r0.json";
  ExpectArtifactMatchesFile(artifacts[0], dump_path);

  // The dump holds both rings; rank 0's newest entry is the collective in flight.
  const json dump = json::parse(trainyard::testing::ReadFileOrEmpty(dump_path));
  ASSERT_EQ(dump["rings"].size(), 2u);
  const json& ring0 = dump["rings"][0];
  EXPECT_EQ(ring0["rank"], 0);
  const json& last = ring0["entries"].back();
  EXPECT_EQ(last["in_flight"], true);
  EXPECT_EQ(last["group"], "dp0");
  EXPECT_EQ(last["op"], "allreduce");
  EXPECT_EQ(last["group_seq"].get<int64_t>(), s.collective_seq());
  EXPECT_EQ(dump["rings"][1]["rank"], 1);
  int64_t rank1_entered = -1;
  for (const json& g : dump["rings"][1]["groups"]) {
    if (g["name"] == "dp0") rank1_entered = g["entered"].get<int64_t>();
  }
  EXPECT_GE(rank1_entered, 0) << "rank 1's ring has the dp0 group";
  EXPECT_LT(rank1_entered, s.collective_seq());
}

TEST(HangDetectionTest, LaggardWithoutALocalRingIsFoundThroughTheStore) {
  // Separate run folders stand for separate hosts: rank 0 cannot read rank 1's ring
  // and learns its progress from what rank 1 published in rank 0's TCPStore.
  const std::string dir = MakeDir("hang_store");
  EngineConfig spec = Spec(2, 6);
  spec.parallelism.collective_timeout_s = 3;
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
  const auto stalls = Stalls(ReadRankEvents(dir + "/r0.jsonl"));
  ASSERT_EQ(stalls.size(), 1u);
  EXPECT_EQ(stalls[0].collective(), "dp0:allreduce");
  EXPECT_EQ(stalls[0].lagging_rank(), 1);
  EXPECT_THAT(stalls[0].message(), HasSubstr("TCPStore"));
  // The dump holds only the ring of rank 0's own folder.
  const json dump = json::parse(trainyard::testing::ReadFileOrEmpty(dir + "/host0/artifacts/flight-a1-r0.json"));
  EXPECT_EQ(dump["rings"].size(), 1u);
}

TEST(HangDetectionTest, StalledRankReportsItsOwnStepTimeout) {
  const std::string dir = MakeDir("hang_step");
  EngineConfig spec = Spec(2, 6);
  spec.training.step_timeout_s = 1.5;
  spec.parallelism.collective_timeout_s = 120;
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

  const auto events = ReadRankEvents(dir + "/r1.jsonl");
  const auto stalls = Stalls(events);
  ASSERT_EQ(stalls.size(), 1u);
  EXPECT_EQ(stalls[0].collective(), "");
  EXPECT_EQ(stalls[0].collective_seq(), 0);
  EXPECT_EQ(stalls[0].lagging_rank(), 1);
  EXPECT_EQ(stalls[0].step(), 2);
  EXPECT_THAT(stalls[0].message(), HasSubstr("no step progress"));
  const auto artifacts = Artifacts(events);
  ASSERT_EQ(artifacts.size(), 1u);
  EXPECT_EQ(artifacts[0].name(), "flight-a1-r1.json");
}

TEST(HangDetectionTest, TestHookIsIgnoredAfterTheFirstAttempt) {
  const std::string dir = MakeDir("hang_retry");
  EngineConfig spec = Spec(1, 3);
  // Long enough that a loaded machine's slow step is not a stall; were the hook
  // honoured, the stalled rank would still be reported after it.
  spec.training.step_timeout_s = 10;
  const std::string config = WriteSpec(dir, spec);
  pid_t r0;
  {
    TestStallEnv env(0, 2);
    r0 = SpawnRank(config, 0, 1, FreePort(), dir + "/r0.jsonl", {"--run-dir", dir + "/run", "--attempt", "2"});
  }
  EXPECT_EQ(WaitExit(r0), 0);
  EXPECT_TRUE(Stalls(ReadRankEvents(dir + "/r0.jsonl")).empty());
}

TEST(ProfilerTraceTest, ProfiledStepWritesAChromeTraceWithEngineRanges) {
  const std::string dir = MakeDir("trace");
  EngineConfig spec = Spec(2, 2);
  spec.compile.backend = "jit";
  // freq 2, warmup 0, active 1: step 1 is profiled (step 3 would be next).
  spec.profiling.enable = true;
  spec.profiling.freq = 2;
  spec.profiling.warmup = 0;
  spec.profiling.active = 1;
  const std::string config = WriteSpec(dir, spec);
  const std::string run = dir + "/run";
  const int port = FreePort();
  pid_t r0 = SpawnRank(config, 0, 2, port, dir + "/r0.jsonl", {"--run-dir", run});
  pid_t r1 = SpawnRank(config, 1, 2, port, dir + "/r1.jsonl", {"--run-dir", run});
  ASSERT_EQ(WaitExit(r0), 0);
  ASSERT_EQ(WaitExit(r1), 0);

  const auto artifacts = Artifacts(ReadRankEvents(dir + "/r0.jsonl"));
  ASSERT_EQ(artifacts.size(), 1u);
  EXPECT_EQ(artifacts[0].name(), "trace-a1-r0-s00000001.json");
  EXPECT_EQ(artifacts[0].kind(), "trace");
  char resolved[PATH_MAX];
  ASSERT_NE(realpath((run + "/artifacts").c_str(), resolved), nullptr);
  const std::string path = std::string(resolved) + "/trace-a1-r0-s00000001.json";
  ExpectArtifactMatchesFile(artifacts[0], path);

  // Kineto's Chrome trace, as torch.profiler writes it: complete events ("X") for ATen
  // operators (cpu_op) and the engine's ranges (user_annotation), and the rank in the
  // distributedInfo TensorBoard's profiler plugin reads.
  const json trace = json::parse(trainyard::testing::ReadFileOrEmpty(path));
  ASSERT_TRUE(trace.contains("traceEvents"));
  ASSERT_TRUE(trace["traceEvents"].is_array());
  EXPECT_EQ(trace.at("distributedInfo").at("rank"), 0);
  EXPECT_EQ(trace.at("distributedInfo").at("world_size"), 2);
  EXPECT_EQ(trace.at("distributedInfo").at("backend"), "gloo");
  std::vector<std::string> names;
  int operators = 0;
  for (const auto& e : trace["traceEvents"]) {
    if (e.value("ph", "") != "X") continue;
    const std::string cat = e.value("cat", "");
    if (cat == "cpu_op" && e.value("name", "").rfind("aten::", 0) == 0) ++operators;
    if (cat == "user_annotation") names.push_back(e["name"]);
  }
  EXPECT_GT(operators, 50) << "ATen operators of the profiled step";
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
  EXPECT_EQ(Artifacts(ReadRankEvents(dir + "/r1.jsonl")).size(), 1u);
}

}  // namespace
}  // namespace trainyard::engine
