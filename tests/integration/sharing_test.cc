// Sharing a fleet end to end: the real controller, workers, CLI and Gloo ranks on
// loopback. A low-priority job preempted by an urgent one checkpoints first and resumes
// bit for bit; a victim whose checkpoint hangs (a test hook) is stopped at the grace
// deadline and resumes from its previous checkpoint; `trainyard checkpoint` on a job
// without an interval; `workers drain` moves a job to the other worker through a
// checkpoint and the drained worker takes no ranks until uncordoned; a quota holds a
// job back and a SIGHUP with a broken policy file keeps the policy in force. Every
// comparison of losses is against the same job run uninterrupted on trainyard-train.
#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/support/test_cluster.h"

namespace trainyard::testing {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

const std::string kTinyJob = TRAINYARD_EXAMPLES "/tiny.toml";


void WriteText(const fs::path& path, const std::string& text) {
  const fs::path tmp = path.string() + ".tmp";
  std::ofstream(tmp) << text;
  fs::rename(tmp, path);
}

// Every step's loss of the job `sets` describes, run uninterrupted on trainyard-train.
std::map<int64_t, double> Reference(const std::vector<std::string>& sets) {
  std::vector<std::string> argv = {TRAINYARD_TRAIN, kTinyJob, "--json"};
  for (const std::string& s : sets) {
    if (s.rfind("checkpoint.", 0) == 0 || s.rfind("job.", 0) == 0) continue;  // neither changes a loss
    argv.insert(argv.end(), {"--set", s});
  }
  const CommandResult r = RunCommand(argv);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return LossesByStep(JsonLines(r.out), 0);
}

// The job_state events of `events`, as (state, reason).
std::vector<std::pair<std::string, std::string>> States(const std::vector<json>& events) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const json& e : events) {
    if (e.contains("job_state")) out.emplace_back(e["job_state"].value("state", ""), e["job_state"].value("reason", ""));
  }
  return out;
}

class SharingTest : public ::testing::Test {
 protected:
  void TearDown() override {
    if (HasFailure() && cluster_) cluster_->KeepFiles();
  }
  void Start(const std::vector<std::string>& controller_args, const std::vector<WorkerOptions>& workers) {
    cluster_ = std::make_unique<TestCluster>(kBuiltBinaries, "sharing");
    ASSERT_TRUE(cluster_->StartController(controller_args)) << "see " << cluster_->dir();
    std::vector<std::string> names;
    for (WorkerOptions w : workers) {
      w.extra_args.insert(w.extra_args.end(), {"--threads-per-rank", "1"});
      cluster_->StartWorker(w);
      names.push_back(w.name);
    }
    ASSERT_TRUE(cluster_->WaitConnected(names, 60000)) << "see " << cluster_->dir();
  }
  static WorkerOptions Worker(const std::string& name, int slots, std::vector<std::string> env = {}) {
    WorkerOptions w;
    w.name = name;
    w.slots = slots;
    w.env = std::move(env);
    return w;
  }
  // A dp=2 tiny job reporting every step, with checkpoints under the cluster's folder.
  std::vector<std::string> Job(const std::string& name, int priority, int steps, int interval) const {
    return {"job.name=" + name,
            "job.priority=" + std::to_string(priority),
            "parallelism.dp=2",
            "training.steps=" + std::to_string(steps),
            "training.log_freq=1",
            "checkpoint.dir=" + (cluster_->dir() / "checkpoints").string(),
            "checkpoint.interval=" + std::to_string(interval),
            "parallelism.collective_timeout_s=60"};
  }
  json Get(const std::string& id) const { return cluster_->Get(id); }
  bool WaitStep(EventFollower& f, int64_t step, int attempt = 1) const {
    return f.WaitFor(
               [&](const json& e) {
                 return e.contains("step_metrics") && e.value("attempt", 0) == attempt &&
                        JsonInt(e["step_metrics"]["step"]) >= step;
               },
               180000)
        .has_value();
  }
  // Every step of every attempt of `events` equals the uninterrupted run's loss.
  static int ExpectLossesMatch(const std::vector<json>& events, const std::map<int64_t, double>& reference) {
    int compared = 0;
    for (const json& e : events) {
      if (!e.contains("step_metrics")) continue;
      const int64_t step = JsonInt(e["step_metrics"]["step"]);
      auto it = reference.find(step);
      if (it == reference.end()) {
        ADD_FAILURE() << "step " << step << " is not in the reference";
        continue;
      }
      EXPECT_EQ(e["step_metrics"].value("loss", 0.0), it->second)
          << "step " << step << " of attempt " << e.value("attempt", 0);
      ++compared;
    }
    return compared;
  }

  std::unique_ptr<TestCluster> cluster_;
};

TEST_F(SharingTest, AnUrgentJobStartsAfterTheVictimsCheckpointAndTheVictimResumesBitForBit) {
  Start({"--preemption-grace", "120"}, {Worker("w1", 2)});
  // Checkpoints only on request: what the victim resumes from is its preemption checkpoint.
  const std::vector<std::string> low_sets = Job("low", 0, 400, 0);
  const std::string low = cluster_->Submit(kTinyJob, low_sets);
  auto low_events = cluster_->Follow(low, "watch-low.log");
  ASSERT_TRUE(WaitStep(*low_events, 10)) << "see " << cluster_->dir();

  const auto submitted = std::chrono::steady_clock::now();
  const std::string urgent = cluster_->Submit(kTinyJob, Job("urgent", 10, 20, 0));
  auto urgent_events = cluster_->Follow(urgent, "watch-urgent.log");
  ASSERT_TRUE(WaitStep(*urgent_events, 1)) << "see " << cluster_->dir();
  const double to_first_step =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - submitted).count();
  urgent_events->WaitEnd();
  EXPECT_EQ(Get(urgent).value("state", ""), "SUCCEEDED");

  const std::vector<json> all = low_events->WaitEnd();
  const json job = Get(low);
  EXPECT_EQ(job.value("state", ""), "SUCCEEDED") << job.dump();
  EXPECT_EQ(job.value("attempt", 0), 2);
  EXPECT_EQ(job.value("preemptions", 0), 1);
  EXPECT_TRUE(job.value("failure_causes", json::array()).empty()) << "a preemption is not a failure: " << job.dump();
  // It stopped after a requested checkpoint and attempt 2 began right after it.
  int64_t saved = 0;
  for (const json& e : all) {
    if (e.contains("checkpoint") && e.value("attempt", 0) == 1 && e["checkpoint"].value("requested", false)) {
      saved = JsonInt(e["checkpoint"]["step"]);
    }
  }
  ASSERT_GT(saved, 10);
  const std::map<int64_t, double> second = LossesByStep(all, 2);
  ASSERT_FALSE(second.empty());
  EXPECT_EQ(second.begin()->first, saved + 1);
  bool restarting = false, pending = false;
  for (const auto& [state, reason] : States(all)) {
    if (state == "RESTARTING") restarting = restarting || reason == "preempted by " + urgent + " (priority 10)";
    if (state == "PENDING") pending = pending || reason.rfind("preempted by " + urgent + " (priority 10); ", 0) == 0;
  }
  EXPECT_TRUE(restarting);
  EXPECT_TRUE(pending);
  EXPECT_GT(ExpectLossesMatch(all, Reference(low_sets)), 400 - 1);
  std::printf("[figures] urgent job: submit to first step %.2f s (victim's checkpoint at step %lld)\n",
              to_first_step, static_cast<long long>(saved));
}

TEST_F(SharingTest, AVictimWhoseCheckpointHangsIsStoppedAtTheGraceAndResumesFromItsPreviousOne) {
  Start({"--preemption-grace", "3"}, {Worker("w1", 2, {"TRAINYARD_TEST_HANG_REQUESTED_CHECKPOINT=1"})});
  const std::vector<std::string> low_sets = Job("low", 0, 300, 10);
  const std::string low = cluster_->Submit(kTinyJob, low_sets);
  auto low_events = cluster_->Follow(low, "watch-low.log");
  ASSERT_TRUE(low_events->WaitFor([](const json& e) { return e.contains("checkpoint"); }, 180000));
  const std::string urgent = cluster_->Submit(kTinyJob, Job("urgent", 10, 5, 0));
  auto urgent_events = cluster_->Follow(urgent, "watch-urgent.log");
  urgent_events->WaitEnd();
  EXPECT_EQ(Get(urgent).value("state", ""), "SUCCEEDED");

  const std::vector<json> all = low_events->WaitEnd();
  const json job = Get(low);
  EXPECT_EQ(job.value("state", ""), "SUCCEEDED") << job.dump();
  EXPECT_EQ(job.value("attempt", 0), 2);
  // No requested checkpoint was ever complete; attempt 2 resumed from the newest interval one.
  int64_t newest = 0;
  for (const json& e : all) {
    if (!e.contains("checkpoint") || e.value("attempt", 0) != 1) continue;
    EXPECT_FALSE(e["checkpoint"].value("requested", false)) << e.dump();
    newest = std::max<int64_t>(newest, JsonInt(e["checkpoint"]["step"]));
  }
  ASSERT_GE(newest, 10);
  const std::map<int64_t, double> second = LossesByStep(all, 2);
  ASSERT_FALSE(second.empty());
  EXPECT_EQ(second.begin()->first, newest + 1);
  bool told = false;
  for (const json& e : all) {
    if (e.contains("log") && e.value("rank", 0) == -1) {
      told = told || e["log"].value("message", "").find("none was complete within the 3 s grace; it resumes from step " +
                                                         std::to_string(newest)) != std::string::npos;
    }
  }
  EXPECT_TRUE(told) << "the victim's stream says why it stopped without a new checkpoint";
  EXPECT_GE(ExpectLossesMatch(all, Reference(low_sets)), 300);
}

TEST_F(SharingTest, CheckpointNowWithoutAnIntervalAndItsRefusals) {
  Start({}, {Worker("w1", 2)});
  const std::string id = cluster_->Submit(kTinyJob, Job("ck", 0, 400, 0));
  auto events = cluster_->Follow(id, "watch.log");
  ASSERT_TRUE(WaitStep(*events, 5));
  const CommandResult r = cluster_->Cli({"checkpoint", id, "--timeout", "120", "--output", "json"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const std::vector<json> lines = JsonLines(r.out);
  ASSERT_EQ(lines.size(), 1u) << r.out;
  const json ck = lines[0].value("checkpoint", json::object());
  const int64_t step = JsonInt(ck.value("step", json(0)));
  EXPECT_GE(step, 6);
  EXPECT_TRUE(fs::exists(fs::path(ck.value("path", "")) / "manifest.json")) << ck.dump();
  EXPECT_EQ(JsonInt(Get(id)["last_checkpoint"]["step"]), step);
  EXPECT_EQ(Get(id).value("state", ""), "RUNNING") << "a checkpoint alone stops nothing";
  ASSERT_EQ(cluster_->Cli({"cancel", id}).exit_code, 0);
  events->WaitEnd();

  const CommandResult ended = cluster_->Cli({"checkpoint", id});
  EXPECT_NE(ended.exit_code, 0);
  EXPECT_NE(ended.err.find("FAILED_PRECONDITION"), std::string::npos) << ended.err;
  EXPECT_NE(ended.err.find("already ended CANCELLED"), std::string::npos) << ended.err;
  const CommandResult unknown = cluster_->Cli({"checkpoint", "job-99"});
  EXPECT_NE(unknown.exit_code, 0);
  EXPECT_NE(unknown.err.find("NOT_FOUND"), std::string::npos) << unknown.err;
  const CommandResult drain_unknown = cluster_->Cli({"workers", "drain", "w9"});
  EXPECT_NE(drain_unknown.exit_code, 0);
  EXPECT_NE(drain_unknown.err.find("NOT_FOUND"), std::string::npos) << drain_unknown.err;
}

TEST_F(SharingTest, DrainMovesTheJobThroughACheckpointAndTheWorkerWaitsForUncordon) {
  Start({}, {Worker("w1", 2), Worker("w2", 2)});
  const std::vector<std::string> sets = Job("moved", 0, 300, 0);
  const std::string id = cluster_->Submit(kTinyJob, sets);
  auto events = cluster_->Follow(id, "watch.log");
  ASSERT_TRUE(WaitStep(*events, 10));
  const std::string first_worker = Get(id)["placement"]["ranks"][0].value("worker", "");
  const std::string other = first_worker == "w1" ? "w2" : "w1";
  const CommandResult drained = cluster_->Cli({"workers", "drain", first_worker, "--reason", "kernel update"});
  ASSERT_EQ(drained.exit_code, 0) << drained.out << drained.err;
  EXPECT_NE(drained.out.find(id), std::string::npos) << drained.out;

  const std::vector<json> all = events->WaitEnd();
  const json job = Get(id);
  EXPECT_EQ(job.value("state", ""), "SUCCEEDED") << job.dump();
  EXPECT_EQ(job.value("attempt", 0), 2);
  for (const json& r : job["placement"]["ranks"]) EXPECT_EQ(r.value("worker", ""), other) << job.dump();
  bool reason = false;
  for (const auto& [state, why] : States(all)) reason = reason || why == "drained from " + first_worker + ": kernel update";
  EXPECT_TRUE(reason);
  EXPECT_GT(ExpectLossesMatch(all, Reference(sets)), 300 - 1);

  // Four ranks need both workers: the drained one takes none until uncordoned.
  const std::string wide = cluster_->Submit(kTinyJob, {"job.name=wide", "parallelism.dp=4", "training.steps=5"});
  ASSERT_TRUE(Eventually([&] { return Get(wide).value("pending_reason", "").find(first_worker + ": cordoned") !=
                                      std::string::npos; },
                         30000))
      << Get(wide).dump();
  const CommandResult workers = cluster_->Cli({"workers"});
  EXPECT_NE(workers.out.find("kernel update"), std::string::npos) << workers.out;
  ASSERT_EQ(cluster_->Cli({"workers", "uncordon", first_worker}).exit_code, 0);
  auto wide_events = cluster_->Follow(wide, "watch-wide.log");
  wide_events->WaitEnd();
  EXPECT_EQ(Get(wide).value("state", ""), "SUCCEEDED");
}

TEST_F(SharingTest, AQuotaHoldsAJobBackAndABrokenPolicyOnSighupKeepsTheOldOne) {
  const fs::path policy = fs::temp_directory_path() / ("trainyard-policy-" + std::to_string(::getpid()) + ".toml");
  // Without a token file every caller is "local".
  WriteText(policy, "[[owner]]\nname = \"local\"\nslots = 2\n");
  Start({"--policy-file", policy.string()}, {Worker("w1", 4)});
  const std::string a = cluster_->Submit(kTinyJob, Job("a", 0, 100000, 0));
  ASSERT_TRUE(Eventually([&] { return Get(a).value("state", "") == "RUNNING"; }, 60000));
  const std::string b = cluster_->Submit(kTinyJob, Job("b", 0, 100000, 0));
  const std::string quota = "quota: local uses 2 of 2 slots; needs 2";
  ASSERT_TRUE(Eventually([&] { return Get(b).value("pending_reason", "") == quota; }, 30000)) << Get(b).dump();
  const CommandResult explain = cluster_->Cli({"explain", b});
  EXPECT_NE(explain.out.find("2 of 2"), std::string::npos) << explain.out;

  WriteText(policy, "[[owner]]\nname = \"local\"\nslotz = 4\n");
  cluster_->SignalController(SIGHUP);
  std::this_thread::sleep_for(std::chrono::seconds(2));
  EXPECT_EQ(Get(b).value("pending_reason", ""), quota) << "the broken file left the policy in force";
  WriteText(policy, "[[owner]]\nname = \"local\"\nslots = 4\n");
  cluster_->SignalController(SIGHUP);
  EXPECT_TRUE(Eventually([&] { return Get(b).value("state", "") == "RUNNING"; }, 60000)) << Get(b).dump();
  for (const std::string& id : {a, b}) EXPECT_EQ(cluster_->Cli({"cancel", id}).exit_code, 0);
  std::ifstream log(cluster_->dir() / "controller.log");
  const std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find(policy.string() + ":3: unknown key"), std::string::npos) << "the log names file:line";
  fs::remove(policy);
}

}  // namespace
}  // namespace trainyard::testing
