// Ranks that explain themselves, end to end: the real controller, worker and rank
// processes on loopback. A rank stopped with SIGSTOP (or stalled outside any
// collective by a test hook) must be named in a Stall event, with the flight-recorder
// dump stored as an artifact and no rank of the attempt left behind; profiled windows
// must come back as Chrome traces whose bytes match their sha256 after a pull; and an
// upload cut by a controller crash must complete after the restart.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/test_cluster.h"
#include "tests/support/files.h"

namespace trainyard::testing {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

const std::string kDebugJob = TRAINYARD_EXAMPLES "/debug.toml";

// Two ranks on one worker, dp=2 ep=2, no restarts: a stall fails the job.
std::vector<std::string> TwoRankJob(int steps) {
  return {"parallelism.dp=2", "parallelism.ep=2", "training.steps=" + std::to_string(steps),
          "restart.max_restarts=0"};
}

bool IsStep(const json& e, int attempt, int64_t min_step) {
  return e.value("attempt", 0) == attempt && e.contains("step_metrics") &&
         JsonInt(e.at("step_metrics").at("step")) >= min_step;
}

std::vector<json> Stalls(const std::vector<json>& events) {
  std::vector<json> out;
  for (const json& e : events) {
    if (e.contains("stall")) out.push_back(e);
  }
  return out;
}

std::string Sha256Sum(const fs::path& path) {
  const CommandResult r = RunCommand({"/usr/bin/sha256sum", path.string()});
  return r.exit_code == 0 ? r.out.substr(0, 64) : "";
}

class DiagnosticsTest : public ::testing::Test {
 protected:
  void StartCluster(const std::vector<std::string>& worker_env,
                    const std::vector<std::string>& controller_args = {}) {
    cluster_ = std::make_unique<TestCluster>(kBuiltBinaries, "diag");
    std::vector<std::string> args = {"--heartbeat-timeout", "5"};
    args.insert(args.end(), controller_args.begin(), controller_args.end());
    ASSERT_TRUE(cluster_->StartController(args))
        << "controller did not start; see " << cluster_->dir() / "controller.log";
    cluster_->StartWorker({"w1", 2, worker_env});
    ASSERT_TRUE(cluster_->WaitConnected({"w1"}, 20000)) << "worker never registered; see " << cluster_->dir();
  }

  // `trainyard artifacts list JOB --output json`, one object per artifact.
  std::vector<json> Artifacts(const std::string& id) const {
    const CommandResult r = cluster_->Cli({"artifacts", "list", id, "--output", "json"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return JsonLines(r.out);
  }

  // Polls the artifact list until `want` artifacts of `kind` are stored (uploads go on
  // after the ranks exited) or the timeout passes.
  std::vector<json> WaitArtifacts(const std::string& id, const std::string& kind, size_t want,
                                  int timeout_ms) const {
    std::vector<json> of_kind;
    const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
    do {
      of_kind.clear();
      for (const json& a : Artifacts(id)) {
        if (a.value("kind", "") == kind) of_kind.push_back(a);
      }
      if (of_kind.size() >= want) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    } while (Clock::now() < deadline);
    return of_kind;
  }

  // Waits until no pid of `pids` exists (the worker tears the gang down).
  static bool AllGone(const std::map<int, pid_t>& pids, int timeout_ms) {
    const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
    while (Clock::now() < deadline) {
      bool alive = false;
      for (const auto& [rank, pid] : pids) alive = alive || ProcessAlive(pid);
      if (!alive) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }

  // The flight-recorder dump is stored, pulls with its sha256, parses as JSON and holds
  // the ring of every rank of the host.
  void ExpectFlightDump(const std::string& id) {
    const std::vector<json> dumps = WaitArtifacts(id, "flight_recorder", 1, 60000);
    ASSERT_GE(dumps.size(), 1u) << "no flight_recorder artifact listed";
    const fs::path out = cluster_->dir() / "pulled-flight";
    const std::string name = dumps[0].value("name", "");
    const CommandResult pull = cluster_->Cli({"artifacts", "pull", id, name, "-o", out.string()});
    ASSERT_EQ(pull.exit_code, 0) << pull.err;
    EXPECT_EQ(Sha256Sum(out / name), dumps[0].value("sha256", "x"));
    const json dump = json::parse(ReadFileOrEmpty(out / name), nullptr, false);
    ASSERT_FALSE(dump.is_discarded()) << name << " is not JSON";
    ASSERT_TRUE(dump.contains("rings")) << dump.dump().substr(0, 300);
    std::set<int> ranks;
    for (const json& r : dump.at("rings")) ranks.insert(r.value("rank", -1));
    EXPECT_EQ(ranks, (std::set<int>{0, 1})) << "the dump holds both rings of the host";
  }

  std::unique_ptr<TestCluster> cluster_;
};

TEST_F(DiagnosticsTest, AStoppedRankIsNamedInAStallAndItsGangIsTornDown) {
  StartCluster({});
  constexpr int kTimeout = 10;
  std::vector<std::string> sets = TwoRankJob(100000);
  sets.push_back("parallelism.collective_timeout_s=" + std::to_string(kTimeout));
  const std::string id = cluster_->Submit(kDebugJob, sets);
  ASSERT_FALSE(id.empty());
  auto follow = cluster_->Follow(id, "stop.jsonl");
  ASSERT_TRUE(follow->WaitFor([](const json& e) { return IsStep(e, 1, 3); }, 300000)) << "never reached step 3";
  const std::map<int, pid_t> pids = RankPids(follow->Events(), 1);
  ASSERT_EQ(pids.size(), 2u);
  ASSERT_EQ(kill(pids.at(1), SIGSTOP), 0);
  const auto stopped_at = Clock::now();

  // Within collective_timeout_s + 5 s the job names the stopped rank.
  const std::optional<json> stall =
      follow->WaitFor([](const json& e) { return e.contains("stall"); }, (kTimeout + 5) * 1000);
  const double took_s = std::chrono::duration<double>(Clock::now() - stopped_at).count();
  ASSERT_TRUE(stall.has_value()) << "no Stall event within collective_timeout_s + 5 s";
  std::printf("stall: SIGSTOP of rank 1 to the Stall event in the job's stream: %.2f s "
              "(collective_timeout_s=%d)\n", took_s, kTimeout);
  const json& s = stall->at("stall");
  EXPECT_EQ(stall->value("rank", -9), 0) << "the waiting rank reports";
  EXPECT_EQ(s.value("lagging_rank", -9), 1) << s.dump();
  const std::string collective = s.value("collective", "");
  EXPECT_NE(collective.find(':'), std::string::npos) << "GROUP:OP, got " << collective;
  EXPECT_GE(JsonInt(s.value("collective_seq", json(0))), 1);
  EXPECT_EQ(s.value("waiting_ranks", json::array()), json::array({0})) << s.dump();

  const std::vector<json> events = follow->WaitEnd();
  EXPECT_EQ(cluster_->Get(id).value("state", ""), "FAILED");
  EXPECT_TRUE(AllGone(pids, 30000)) << "a rank process of the stalled attempt is left";
  ExpectFlightDump(id);
  // Every Stall names rank 1 as the one behind.
  for (const json& e : Stalls(events)) EXPECT_EQ(e.at("stall").value("lagging_rank", -9), 1) << e.dump();
}

TEST_F(DiagnosticsTest, ARankStalledOutsideAnyCollectiveIsReportedByTheStepTimeout) {
  StartCluster({"TRAINYARD_TEST_STALL_RANK=1", "TRAINYARD_TEST_STALL_AT_STEP=4"});
  constexpr int kStepTimeout = 5;
  std::vector<std::string> sets = TwoRankJob(100000);
  sets.push_back("training.step_timeout_s=" + std::to_string(kStepTimeout));
  sets.push_back("parallelism.collective_timeout_s=60");
  const std::string id = cluster_->Submit(kDebugJob, sets);
  ASSERT_FALSE(id.empty());
  auto follow = cluster_->Follow(id, "step-timeout.jsonl");
  const std::optional<json> stall = follow->WaitFor([](const json& e) { return e.contains("stall"); }, 300000);
  ASSERT_TRUE(stall.has_value()) << "no Stall event";
  const std::map<int, pid_t> pids = RankPids(follow->Events(), 1);
  const json& s = stall->at("stall");
  EXPECT_EQ(stall->value("rank", -9), 1) << "the stalled rank's own watchdog reports";
  EXPECT_EQ(s.value("lagging_rank", -9), 1) << s.dump();
  EXPECT_EQ(s.value("collective", "x"), "") << "no collective was in flight";
  EXPECT_EQ(JsonInt(s.value("step", json(0))), 4) << s.dump();
  EXPECT_GE(s.value("waited_s", 0.0), kStepTimeout);

  follow->WaitEnd();
  EXPECT_EQ(cluster_->Get(id).value("state", ""), "FAILED");
  EXPECT_TRUE(AllGone(pids, 30000)) << "a rank process of the stalled attempt is left";
  ExpectFlightDump(id);
}

// Steps 2-3 and 7-8 are profiled (freq 5, warmup 1, active 2): four traces for 2 ranks.
TEST_F(DiagnosticsTest, ProfiledWindowsComeBackAsChromeTracesThatMatchTheirSha256) {
  StartCluster({});
  std::vector<std::string> sets = TwoRankJob(10);
  for (const char* kv : {"profiling.enable=true", "profiling.freq=5", "profiling.warmup=1", "profiling.active=2"}) {
    sets.push_back(kv);
  }
  const std::string id = cluster_->Submit(kDebugJob, sets);
  ASSERT_FALSE(id.empty());
  const std::vector<json> events = cluster_->Follow(id, "profile.jsonl")->WaitEnd();
  ASSERT_EQ(cluster_->Get(id).value("state", ""), "SUCCEEDED");

  const std::vector<json> traces = WaitArtifacts(id, "trace", 4, 60000);
  ASSERT_EQ(traces.size(), 4u);
  std::set<std::pair<int, std::string>> windows;
  const fs::path out = cluster_->dir() / "pulled";
  const CommandResult pull = cluster_->Cli({"artifacts", "pull", id, "-o", out.string()});
  ASSERT_EQ(pull.exit_code, 0) << pull.err;
  for (const json& t : traces) {
    const std::string name = t.value("name", "");
    windows.insert({t.value("rank", -1), name});
    ASSERT_TRUE(fs::exists(out / name)) << name;
    EXPECT_EQ(Sha256Sum(out / name), t.value("sha256", "x")) << name;
    const json trace = json::parse(ReadFileOrEmpty(out / name), nullptr, false);
    ASSERT_FALSE(trace.is_discarded()) << name << " is not JSON";
    ASSERT_TRUE(trace.contains("traceEvents") && trace.at("traceEvents").is_array()) << name;
    std::set<std::string> names;
    for (const json& ev : trace.at("traceEvents")) names.insert(ev.value("name", ""));
    auto has_prefix = [&](const std::string& prefix) {
      return std::any_of(names.begin(), names.end(),
                         [&](const std::string& n) { return n.rfind(prefix, 0) == 0; });
    };
    EXPECT_TRUE(has_prefix("collective:")) << name << " has no collective range";
    EXPECT_TRUE(names.count("trainyard::optimizer")) << name << " has no optimizer range";
    EXPECT_TRUE(names.count("trainyard::data")) << name << " has no data range";
    EXPECT_TRUE(has_prefix("region:")) << name << " has no region range";
  }
  int rank0 = 0;
  for (const auto& [rank, name] : windows) rank0 += rank == 0;
  EXPECT_EQ(rank0, 2) << "one trace per rank per window";
  // Each stored trace was announced while the job ran, or indexed after it ended.
  for (const json& e : events) {
    if (e.contains("artifact_ref")) {
      EXPECT_EQ(e.at("artifact_ref").value("kind", ""), "trace");
    }
  }
}

TEST_F(DiagnosticsTest, AnUploadCutByAControllerCrashCompletesAfterTheRestart) {
  // Small, slow chunks so the controller can be killed with the upload half done.
  StartCluster({"TRAINYARD_TEST_ARTIFACT_CHUNK_BYTES=4096", "TRAINYARD_TEST_ARTIFACT_CHUNK_DELAY_MS=50"});
  std::vector<std::string> sets = {"parallelism.dp=1", "training.steps=6", "profiling.enable=true",
                                   "profiling.freq=100", "profiling.warmup=1", "profiling.active=2"};
  const std::string id = cluster_->Submit(kDebugJob, sets);
  ASSERT_FALSE(id.empty());
  const fs::path job_dir = cluster_->dir() / "data" / "artifacts" / id;
  // Wait until a partial upload holds some bytes.
  fs::path part;
  const auto deadline = Clock::now() + std::chrono::minutes(5);
  while (part.empty() && Clock::now() < deadline) {
    std::error_code ec;
    for (auto it = fs::directory_iterator(job_dir, ec); !ec && it != fs::directory_iterator(); ++it) {
      if (it->path().extension() == ".part" && fs::file_size(it->path(), ec) > 4096) part = it->path();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_FALSE(part.empty()) << "no partial upload appeared under " << job_dir;
  cluster_->KillController();
  std::error_code ec;
  const auto held = fs::file_size(part, ec);
  std::this_thread::sleep_for(std::chrono::seconds(1));
  ASSERT_TRUE(cluster_->RestartController()) << "controller did not restart";

  const std::vector<json> traces = WaitArtifacts(id, "trace", 1, 120000);
  ASSERT_EQ(traces.size(), 1u);
  EXPECT_GT(JsonInt(traces[0].at("size_bytes")), static_cast<int64_t>(held)) << "the crash cut the upload short";
  const fs::path out = cluster_->dir() / "pulled";
  const std::string name = traces[0].value("name", "");
  const CommandResult pull = cluster_->Cli({"artifacts", "pull", id, name, "-o", out.string()});
  ASSERT_EQ(pull.exit_code, 0) << pull.err;
  EXPECT_EQ(Sha256Sum(out / name), traces[0].value("sha256", "x"));
  EXPECT_TRUE(json::parse(ReadFileOrEmpty(out / name), nullptr, false).contains("traceEvents"));
  EXPECT_FALSE(fs::exists(part)) << "the partial file remains after completion";
  std::printf("upload: %lld of %lld bytes held at the controller crash; completed after the restart\n",
              static_cast<long long>(held), static_cast<long long>(JsonInt(traces[0].at("size_bytes"))));
}

}  // namespace
}  // namespace trainyard::testing
