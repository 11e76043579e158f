// Dependencies end to end: the real controller, worker, CLI and Gloo ranks on loopback.
// A pipeline pretrain → evaluate (a job whose initial_load_path is the pretrain's
// checkpoint folder) → export (a job after the evaluation) runs in order through a
// controller killed with SIGKILL mid-chain, each job waiting with a reason that names
// the one before it; a failure of the first fails the rest at once, each naming why; and
// the CLI's refusals of bad lists and unknown jobs store nothing.
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/test_cluster.h"

namespace trainyard::testing {
namespace {

using nlohmann::json;

const std::string kTinyJob = TRAINYARD_EXAMPLES "/tiny.toml";


class DependenciesTest : public ::testing::Test {
 protected:
  void TearDown() override {
    if (HasFailure() && cluster_) cluster_->KeepFiles();
  }
  void Start() {
    cluster_ = std::make_unique<TestCluster>(kBuiltBinaries, "deps");
    ASSERT_TRUE(cluster_->StartController()) << "see " << cluster_->dir();
    WorkerOptions w;
    w.name = "w1";
    w.slots = 2;
    w.extra_args = {"--threads-per-rank", "1"};
    cluster_->StartWorker(w);
    ASSERT_TRUE(cluster_->WaitConnected({"w1"}, 60000)) << "see " << cluster_->dir();
  }
  std::string CheckpointDir() const { return (cluster_->dir() / "checkpoints").string(); }
  // `submit` with --set `sets` and --after `after`; the job id, "" when refused.
  CommandResult SubmitAfter(const std::vector<std::string>& sets, const std::vector<std::string>& after,
                            const std::string& file = kTinyJob) const {
    std::vector<std::string> args = {"submit", file, "--output", "json"};
    for (const auto& s : sets) args.insert(args.end(), {"--set", s});
    for (const auto& a : after) args.insert(args.end(), {"--after", a});
    return cluster_->Cli(args);
  }
  std::string IdOf(const CommandResult& r) const {
    EXPECT_EQ(r.exit_code, 0) << r.err;
    const std::vector<json> lines = JsonLines(r.out);
    return r.exit_code == 0 && !lines.empty() ? lines[0].value("id", "") : "";
  }
  std::string State(const std::string& id) const { return cluster_->Get(id).value("state", ""); }
  bool WaitState(const std::string& id, const std::string& state, int timeout_ms) const {
    return Eventually([&] { return State(id) == state; }, timeout_ms);
  }
  // The job_state events of `id` from the store, as "STATE reason".
  std::vector<std::string> StateEvents(const std::string& id) const {
    const CommandResult r = cluster_->Cli({"watch", id, "--output", "json", "--from-seq", "1"});
    std::vector<std::string> out;
    for (const json& e : JsonLines(r.out)) {
      if (e.contains("job_state")) {
        out.push_back(e["job_state"].value("state", "") + " " + e["job_state"].value("reason", ""));
      }
    }
    return out;
  }
  // A tiny job of `steps` steps reporting each one, with one checkpoint at its end.
  std::vector<std::string> Common(const std::string& name, int steps) const {
    return {"job.name=" + name, "training.steps=" + std::to_string(steps), "training.log_freq=1",
            "checkpoint.dir=" + CheckpointDir(), "checkpoint.interval=" + std::to_string(steps)};
  }

  std::unique_ptr<TestCluster> cluster_;
};

TEST_F(DependenciesTest, APipelineRunsInOrderThroughAControllerKill) {
  ASSERT_NO_FATAL_FAILURE(Start());
  constexpr int kPretrainSteps = 1000;
  const std::string pretrain = IdOf(SubmitAfter(Common("pretrain", kPretrainSteps), {}));
  ASSERT_FALSE(pretrain.empty());
  const std::string evaluate =
      IdOf(SubmitAfter({"job.name=evaluate", "training.steps=5", "training.log_freq=1", "validation.dataset=synthetic",
                        "validation.freq=5", "validation.steps=2", "checkpoint.dir=" + CheckpointDir(),
                        "checkpoint.interval=5", "checkpoint.initial_load_path=" + CheckpointDir() + "/" + pretrain},
                       {pretrain}));
  ASSERT_FALSE(evaluate.empty());
  const std::string exported = IdOf(SubmitAfter(
      {"job.name=export", "training.steps=1", "checkpoint.initial_load_path=" + CheckpointDir() + "/" + evaluate},
      {evaluate}));
  ASSERT_FALSE(exported.empty());
  ASSERT_TRUE(WaitState(pretrain, "RUNNING", 120000)) << State(pretrain);
  ASSERT_TRUE(Eventually(
      [&] {
        return cluster_->Get(evaluate).value("pending_reason", "") ==
               "waiting for " + pretrain + " to succeed (" + pretrain + " is RUNNING)";
      },
      30000))
      << cluster_->Get(evaluate).dump();
  EXPECT_EQ(cluster_->Get(exported).value("pending_reason", ""),
            "waiting for " + evaluate + " to succeed (" + evaluate + " is PENDING)");

  // Mid-chain: the pretrain is running, both dependents wait.
  ASSERT_EQ(State(pretrain), "RUNNING") << "the pretrain ended before the kill; give it more steps";
  cluster_->KillController();
  ASSERT_TRUE(cluster_->RestartController()) << "see " << cluster_->dir();
  EXPECT_EQ(State(evaluate), "PENDING");
  EXPECT_EQ(State(exported), "PENDING");

  ASSERT_TRUE(WaitState(exported, "SUCCEEDED", 300000)) << cluster_->Get(exported).dump();
  const json p = cluster_->Get(pretrain);
  const json e = cluster_->Get(evaluate);
  const json x = cluster_->Get(exported);
  EXPECT_EQ(p.value("state", ""), "SUCCEEDED");
  EXPECT_EQ(e.value("state", ""), "SUCCEEDED");
  // Each started only after the one before it ended.
  EXPECT_LE(RfcSeconds(p.value("end_time", "")), RfcSeconds(e.value("start_time", ""))) << p.dump() << e.dump();
  EXPECT_LE(RfcSeconds(e.value("end_time", "")), RfcSeconds(x.value("start_time", ""))) << e.dump() << x.dump();
  // Nothing lost: the pretrain reported every step once, across the controller kill.
  const CommandResult steps = cluster_->Cli({"watch", pretrain, "--output", "json", "--from-seq", "1"});
  std::map<int64_t, int> seen;
  for (const json& ev : JsonLines(steps.out)) {
    if (ev.contains("step_metrics")) ++seen[JsonInt(ev["step_metrics"]["step"])];
  }
  EXPECT_EQ(seen.size(), static_cast<size_t>(kPretrainSteps));
  for (const auto& [step, n] : seen) EXPECT_EQ(n, 1) << "step " << step;
  // The evaluation started from the pretrain's weights and validated them.
  bool validated = false;
  for (const json& ev : JsonLines(cluster_->Cli({"watch", evaluate, "--output", "json", "--from-seq", "1"}).out)) {
    validated = validated || ev.contains("validation");
  }
  EXPECT_TRUE(validated);
  bool waited = false;
  for (const std::string& s : StateEvents(exported)) {
    waited = waited || s == "PENDING waiting for " + evaluate + " to succeed (" + evaluate + " is RUNNING)";
  }
  EXPECT_TRUE(waited) << "the export's stored reasons name the evaluation's state";
}

TEST_F(DependenciesTest, AFailedFirstJobFailsTheChainAtOnceWithReasons) {
  ASSERT_NO_FATAL_FAILURE(Start());
  // A token file that does not exist: the rank exits with an input error, no restart.
  const std::string first = IdOf(SubmitAfter(
      {"job.name=pretrain", "training.dataset=tokens", "training.dataset_path=/nonexistent/tokens.bin"}, {}));
  ASSERT_FALSE(first.empty());
  const std::string second = IdOf(SubmitAfter({"job.name=evaluate"}, {first}));
  const std::string third = IdOf(SubmitAfter({"job.name=export"}, {second}));
  const std::string on_failure = IdOf(SubmitAfter({"job.name=report"}, {first + ":failed"}));
  ASSERT_TRUE(WaitState(third, "FAILED", 120000)) << cluster_->Get(third).dump();
  EXPECT_EQ(State(first), "FAILED");
  EXPECT_EQ(cluster_->Get(second).value("failure_reason", ""),
            "dependency " + first + " ended FAILED; job.after needed it to succeed");
  EXPECT_EQ(cluster_->Get(third).value("failure_reason", ""),
            "dependency " + second + " ended FAILED; job.after needed it to succeed");
  EXPECT_TRUE(WaitState(on_failure, "SUCCEEDED", 120000)) << "it waited for the failure";
}

TEST_F(DependenciesTest, TheCliRefusesBadListsAndUnknownJobsStoringNothing) {
  ASSERT_NO_FATAL_FAILURE(Start());
  const std::string a = IdOf(SubmitAfter({"job.name=a", "training.steps=1"}, {}));
  ASSERT_FALSE(a.empty());
  CommandResult unknown = SubmitAfter({}, {"job-999"});
  EXPECT_EQ(unknown.exit_code, 3) << unknown.err;
  EXPECT_NE(unknown.err.find("job.after: job job-999 not found"), std::string::npos) << unknown.err;
  CommandResult twice = SubmitAfter({"job.after=\"" + a + "\""}, {a + ":failed"});
  EXPECT_EQ(twice.exit_code, 2) << twice.err;
  EXPECT_NE(twice.err.find("job " + a + " is named twice"), std::string::npos) << twice.err;
  CommandResult cond = SubmitAfter({}, {a + ":whenever"});
  EXPECT_EQ(cond.exit_code, 2);
  EXPECT_NE(cond.err.find("unknown condition \"whenever\""), std::string::npos) << cond.err;
  std::string many;
  for (int i = 0; i < 17; ++i) many += (i ? "," : "") + std::string("job-") + std::to_string(i + 1);
  CommandResult huge = SubmitAfter({"job.after=\"" + many + "\""}, {});
  EXPECT_EQ(huge.exit_code, 2);
  EXPECT_NE(huge.err.find("names more than 16 jobs"), std::string::npos) << huge.err;
  const CommandResult list = cluster_->Cli({"list", "--output", "json"});
  EXPECT_EQ(JsonLines(list.out).size(), 1u) << "only the first job was stored:\n" << list.out;
}

}  // namespace
}  // namespace trainyard::testing
