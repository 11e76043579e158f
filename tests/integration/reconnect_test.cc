// A partition that costs nothing, end to end: the real controller, worker and rank
// processes on loopback. The worker daemon is SIGSTOPped (its ranks, in their own
// process groups, train on) for longer than the controller's heartbeat timeout but
// shorter than its reconnect window, then resumed. The controller shows it UNREACHABLE
// meanwhile and keeps the attempt; after SIGCONT the attempt is re-adopted: one attempt,
// gapless seqs, every step reported once, the losses bit-identical to an undisturbed
// run's, and the job succeeds.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "tests/support/test_cluster.h"

namespace trainyard::testing {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

const std::string kDebugJob = TRAINYARD_EXAMPLES "/debug.toml";
constexpr int kSteps = 20;
constexpr int kHeartbeatTimeoutS = 3;
constexpr int kReconnectWindowS = 60;

std::vector<std::string> Job(const fs::path& checkpoint_dir) {
  return {"parallelism.dp=2",
          "parallelism.ep=2",
          "parallelism.collective_timeout_s=120",
          "training.steps=" + std::to_string(kSteps),
          "checkpoint.interval=10",  // saved, never resumed from
          "checkpoint.dir=" + checkpoint_dir.string(),
          "restart.max_restarts=2",
          "restart.backoff_s=0"};
}

class ReconnectTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cluster_ = std::make_unique<TestCluster>(kBuiltBinaries, "reconnect");
    ASSERT_TRUE(cluster_->StartController({"--heartbeat-timeout", std::to_string(kHeartbeatTimeoutS),
                                           "--reconnect-window", std::to_string(kReconnectWindowS)}))
        << "controller did not start; see " << cluster_->dir() / "controller.log";
    WorkerOptions w1;
    w1.name = "w1";
    w1.slots = 2;
    cluster_->StartWorker(w1);
    ASSERT_TRUE(cluster_->WaitConnected({"w1"}, 20000)) << "worker never registered; see " << cluster_->dir();
  }
  void TearDown() override {
    if (cluster_) cluster_->SignalWorker("w1", SIGCONT);  // never leave it stopped
    if (HasFailure() && cluster_) cluster_->KeepFiles();
  }

  // w1 as `trainyard workers --output json` lists it.
  json WorkerW1() const {
    for (const json& w : JsonLines(cluster_->Cli({"workers", "--output", "json"}).out)) {
      if (w.value("name", "") == "w1") return w;
    }
    return json::object();
  }

  std::unique_ptr<TestCluster> cluster_;
};

TEST_F(ReconnectTest, AWorkerStoppedPastTheHeartbeatTimeoutIsReAdoptedWithoutARestart) {
  // The undisturbed run.
  const std::string ref = cluster_->Submit(kDebugJob, Job(cluster_->dir() / "ck-ref"));
  ASSERT_FALSE(ref.empty());
  const std::vector<json> reference = cluster_->Follow(ref, "reference.jsonl")->WaitEnd();
  ASSERT_EQ(cluster_->Get(ref).value("state", ""), "SUCCEEDED");
  const std::map<int64_t, double> want = LossesByStep(reference, 1);
  ASSERT_EQ(want.size(), static_cast<size_t>(kSteps));

  const std::string id = cluster_->Submit(kDebugJob, Job(cluster_->dir() / "ck"));
  ASSERT_FALSE(id.empty());
  auto follow = cluster_->Follow(id, "partitioned.jsonl");
  ASSERT_TRUE(follow->WaitFor(
      [](const json& e) { return e.contains("step_metrics") && JsonInt(e.at("step_metrics").at("step")) >= 3; },
      300000));

  cluster_->SignalWorker("w1", SIGSTOP);
  const auto stopped = std::chrono::steady_clock::now();
  // The controller marks it unreachable after the heartbeat timeout and waits.
  json w1;
  for (int i = 0; i < 200; ++i) {
    w1 = WorkerW1();
    if (w1.value("unreachable", false)) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_TRUE(w1.value("unreachable", false)) << w1.dump();
  EXPECT_TRUE(w1.contains("reconnect_deadline")) << w1.dump();
  const json during = cluster_->Get(id);
  EXPECT_EQ(during.value("state", ""), "RUNNING") << during.dump();
  EXPECT_EQ(during.value("attempt", 0), 1);
  EXPECT_NE(during.value("unreachable_reason", "").find("for worker w1 to reconnect"), std::string::npos)
      << during.dump();
  const CommandResult table = cluster_->Cli({"workers"});
  EXPECT_NE(table.out.find("UNREACHABLE since "), std::string::npos) << table.out;
  // Its ranks train on meanwhile; their events wait in the stopped worker.
  std::this_thread::sleep_for(std::chrono::seconds(2));
  cluster_->SignalWorker("w1", SIGCONT);
  const double stopped_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - stopped).count();

  const std::vector<json> events = follow->WaitEnd();
  const json job = cluster_->Get(id);
  EXPECT_EQ(job.value("state", ""), "SUCCEEDED") << job.dump();
  EXPECT_EQ(job.value("attempt", 0), 1) << "re-adopted, not restarted";
  EXPECT_TRUE(job.value("failure_causes", json::array()).empty()) << job.dump();
  EXPECT_EQ(job.value("unreachable_reason", ""), "");

  // Gapless seqs, every (rank, step) once, nothing after the terminal state.
  int64_t seq = 0;
  std::map<std::pair<int, int64_t>, int> reported;
  bool readopted = false;
  bool terminal = false;
  for (const json& e : events) {
    EXPECT_EQ(JsonInt(e.at("seq")), ++seq);
    EXPECT_FALSE(terminal) << "after the terminal state: " << e.dump();
    if (e.contains("step_metrics")) ++reported[{e.value("rank", 0), JsonInt(e.at("step_metrics").at("step"))}];
    if (e.contains("log")) {
      const std::string msg = e.at("log").value("message", "");
      if (msg.rfind("worker w1 reconnected after ", 0) == 0 && msg.find("; attempt 1 re-adopted") != std::string::npos) {
        readopted = true;
      }
    }
    if (e.contains("job_state") && e.at("job_state").value("state", "") == "SUCCEEDED") terminal = true;
  }
  for (const auto& [rank_step, n] : reported) {
    EXPECT_EQ(n, 1) << "rank " << rank_step.first << " step " << rank_step.second << " reported " << n << " times";
  }
  EXPECT_TRUE(readopted) << "no 're-adopted' event in the job's stream";
  const std::map<int64_t, double> got = LossesByStep(events, 1);
  ASSERT_EQ(got.size(), static_cast<size_t>(kSteps));
  for (const auto& [step, loss] : got) EXPECT_EQ(loss, want.at(step)) << "step " << step;
  std::printf("reconnect: worker stopped %.1f s (heartbeat timeout %d s), attempt 1 re-adopted\n", stopped_s,
              kHeartbeatTimeoutS);
}

}  // namespace
}  // namespace trainyard::testing
