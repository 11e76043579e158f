// Jobs that survive faults, end to end: the real controller, workers and rank processes
// on loopback, with checkpoints on the local disk. A rank is killed with SIGKILL at the
// worst moments (mid-run, inside a checkpoint write, with its worker daemon) and the
// job must restart from the newest complete checkpoint and train exactly as an
// uninterrupted run does.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/support/files.h"
#include "tests/support/test_cluster.h"

namespace trainyard::testing {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

const std::string kDebugJob = TRAINYARD_EXAMPLES "/debug.toml";
// The tests whose point is the restart, not the model, train the tiny preset: the same
// code paths at a fraction of the CPU. Where its steps would outrun the test, a test hook
// holds the job mid-run.
const std::string kTinyJob = TRAINYARD_EXAMPLES "/tiny.toml";
constexpr int kSteps = 20;

// The acceptance job: 2 ranks, dp=2 ep=2, 20 steps, a checkpoint every 5.
std::vector<std::string> FaultJob(const fs::path& checkpoint_dir, int dp = 2) {
  return {"parallelism.dp=" + std::to_string(dp),
          "parallelism.ep=2",
          "parallelism.collective_timeout_s=30",
          "training.steps=" + std::to_string(kSteps),
          "checkpoint.interval=5",
          "checkpoint.keep=2",
          "checkpoint.dir=" + checkpoint_dir.string(),
          "restart.max_restarts=2",
          "restart.backoff_s=0"};
}

bool IsStepOfAttempt(const json& e, int attempt, int64_t min_step) {
  return e.value("attempt", 0) == attempt && e.contains("step_metrics") &&
         JsonInt(e.at("step_metrics").at("step")) >= min_step;
}

std::vector<json> OfKind(const std::vector<json>& events, const std::string& kind, int attempt) {
  std::vector<json> out;
  for (const json& e : events) {
    if (e.contains(kind) && (attempt == 0 || e.value("attempt", 0) == attempt)) out.push_back(e);
  }
  return out;
}

// The step the attempt resumed from: one before its first reported step.
int64_t ResumedFrom(const std::vector<json>& events, int attempt) {
  const std::map<int64_t, double> losses = LossesByStep(events, attempt);
  return losses.empty() ? -1 : losses.begin()->first - 1;
}

void PrintCheckpointFigures(const std::vector<json>& events) {
  for (const json& e : OfKind(events, "checkpoint", 0)) {
    const json& c = e.at("checkpoint");
    std::printf("checkpoint attempt=%d step=%lld bytes=%lld blocked_ms=%.1f write_ms=%.1f\n",
                e.value("attempt", 0), static_cast<long long>(JsonInt(c.at("step"))),
                static_cast<long long>(JsonInt(c.value("bytes", json(0)))), c.value("blocked_ms", 0.0),
                c.value("write_ms", 0.0));
  }
}

class FaultTest : public ::testing::Test {
 protected:
  void StartCluster(const std::vector<WorkerOptions>& workers) {
    cluster_ = std::make_unique<TestCluster>(kBuiltBinaries, "fault");
    // A killed worker is lost 3 s + 2 s after its last heartbeat (unreachable, then past
    // the reconnect window), as fast as before the window existed.
    ASSERT_TRUE(cluster_->StartController({"--heartbeat-timeout", "3", "--reconnect-window", "2"}))
        << "controller did not start; see " << cluster_->dir() / "controller.log";
    std::vector<std::string> names;
    for (const WorkerOptions& w : workers) {
      cluster_->StartWorker(w);
      names.push_back(w.name);
    }
    ASSERT_TRUE(cluster_->WaitConnected(names, 20000)) << "workers never registered; see " << cluster_->dir();
  }

  // Runs `sets` to its end and returns its events (the reference run).
  std::vector<json> RunToEnd(const std::vector<std::string>& sets, const std::string& name) {
    const std::string id = cluster_->Submit(kDebugJob, sets);
    if (id.empty()) return {};
    std::vector<json> events = cluster_->Follow(id, name + ".jsonl")->WaitEnd();
    EXPECT_EQ(cluster_->Get(id).value("state", ""), "SUCCEEDED") << name << " " << id;
    return events;
  }

  std::unique_ptr<TestCluster> cluster_;
};

TEST_F(FaultTest, ARankKilledMidRunResumesFromTheNewestCheckpointBitForBit) {
  StartCluster({{"w1", 2, {}}});
  const std::vector<json> reference = RunToEnd(FaultJob(cluster_->dir() / "ck-ref"), "reference");
  const std::map<int64_t, double> want = LossesByStep(reference, 1);
  ASSERT_EQ(want.size(), static_cast<size_t>(kSteps));
  PrintCheckpointFigures(reference);

  const std::string id = cluster_->Submit(kDebugJob, FaultJob(cluster_->dir() / "ck"));
  ASSERT_FALSE(id.empty());
  auto follow = cluster_->Follow(id, "killed.jsonl");
  ASSERT_TRUE(follow->WaitFor([](const json& e) { return IsStepOfAttempt(e, 1, 12); }, 300000))
      << "attempt 1 never reached step 12";
  const std::map<int, pid_t> pids = RankPids(follow->Events(), 1);
  ASSERT_EQ(pids.count(1), 1u);
  ASSERT_EQ(kill(pids.at(1), SIGKILL), 0);
  const auto killed_at = Clock::now();
  ASSERT_TRUE(follow->WaitFor([](const json& e) { return IsStepOfAttempt(e, 2, 0); }, 300000))
      << "attempt 2 never trained";
  const double restart_s = std::chrono::duration<double>(Clock::now() - killed_at).count();
  const std::vector<json> events = follow->WaitEnd();

  const json job = cluster_->Get(id);
  EXPECT_EQ(job.value("state", ""), "SUCCEEDED");
  EXPECT_EQ(job.value("attempt", 0), 2);
  // Attempt 2 resumed from the newest checkpoint attempt 1 completed before the kill.
  const int64_t resumed = ResumedFrom(events, 2);
  std::vector<int64_t> saved;
  for (const json& e : OfKind(events, "checkpoint", 1)) saved.push_back(JsonInt(e.at("checkpoint").at("step")));
  ASSERT_FALSE(saved.empty());
  EXPECT_EQ(resumed, saved.back()) << "attempt 2 must resume from the newest complete checkpoint";
  EXPECT_GE(resumed, 10);
  // Every step either attempt reported is bit-identical to the uninterrupted run.
  for (int attempt : {1, 2}) {
    for (const auto& [step, loss] : LossesByStep(events, attempt)) {
      EXPECT_EQ(loss, want.at(step)) << "attempt " << attempt << " step " << step;
    }
  }
  EXPECT_EQ(LossesByStep(events, 2).size(), static_cast<size_t>(kSteps - resumed));
  // The cause is in the job's stream.
  bool cause = false;
  for (const json& e : OfKind(events, "job_state", 1)) {
    const json& s = e.at("job_state");
    if (s.value("state", "") == "RESTARTING" && s.value("reason", "").find("rank 1") != std::string::npos) cause = true;
  }
  EXPECT_TRUE(cause) << "no RESTARTING event naming rank 1";
  std::printf("restart: kill -9 of rank 1 to attempt 2's first step report: %.2f s (resumed from step %lld)\n",
              restart_s, static_cast<long long>(resumed));
  PrintCheckpointFigures(events);
}

TEST_F(FaultTest, ARankKilledInsideACheckpointWriteLeavesThePreviousCheckpointNewest) {
  // Attempt 1's writers pause inside the step-10 checkpoint (a test-only hook).
  StartCluster({{"w1", 2, {"TRAINYARD_TEST_PAUSE_CHECKPOINT_AT_STEP=10"}}});
  const fs::path ck = cluster_->dir() / "ck";
  const std::string id = cluster_->Submit(kTinyJob, FaultJob(ck));
  ASSERT_FALSE(id.empty());
  auto follow = cluster_->Follow(id, "killed.jsonl");
  ASSERT_TRUE(follow->WaitFor(
      [](const json& e) {
        return e.value("attempt", 0) == 1 && e.value("rank", -1) == 1 && e.contains("log") &&
               e.at("log").value("message", "").find("test hook: checkpoint write paused") != std::string::npos;
      },
      300000))
      << "rank 1 never paused inside the step-10 checkpoint write";
  const std::map<int, pid_t> pids = RankPids(follow->Events(), 1);
  ASSERT_EQ(pids.count(1), 1u);
  ASSERT_EQ(kill(pids.at(1), SIGKILL), 0);
  const std::vector<json> events = follow->WaitEnd();

  const json job = cluster_->Get(id);
  EXPECT_EQ(job.value("state", ""), "SUCCEEDED");
  EXPECT_EQ(job.value("attempt", 0), 2);
  for (const json& e : OfKind(events, "checkpoint", 1)) {
    EXPECT_LT(JsonInt(e.at("checkpoint").at("step")), 10) << "the interrupted checkpoint was reported complete";
  }
  EXPECT_EQ(ResumedFrom(events, 2), 5) << "the restart must use the step-5 checkpoint";
  // The half-written checkpoint never got a manifest.
  const fs::path cut = ck / id / "step-00000010-attempt-1";
  EXPECT_FALSE(fs::exists(cut / "manifest.json")) << cut;
  // Steps 6.. ran twice, from the same state: attempt 2 repeats attempt 1 exactly.
  const std::map<int64_t, double> first = LossesByStep(events, 1);
  int compared = 0;
  for (const auto& [step, loss] : LossesByStep(events, 2)) {
    if (first.count(step) == 0) continue;
    EXPECT_EQ(loss, first.at(step)) << "step " << step;
    ++compared;
  }
  EXPECT_GE(compared, 4);
}

TEST_F(FaultTest, ALostWorkerShrinksTheJobToTheSlotsLeftKeepingTheGlobalBatch) {
  // Rank 1 stalls before step 13 of attempt 1 (a test hook; in both workers'
  // environments, since either may hold rank 1), so the tiny job is still mid-run when
  // its worker is killed.
  const std::vector<std::string> stall = {"TRAINYARD_TEST_STALL_RANK=1", "TRAINYARD_TEST_STALL_AT_STEP=13"};
  StartCluster({{"w1", 1, stall}, {"w2", 1, stall}});
  // The reference: the same job on local ranks (trainyard-train), without the hook.
  std::vector<std::string> argv = {TRAINYARD_TRAIN, kTinyJob, "--json"};
  for (const std::string& set : FaultJob(cluster_->dir() / "ck-ref")) argv.insert(argv.end(), {"--set", set});
  const CommandResult ref = RunCommand(argv);
  ASSERT_EQ(ref.exit_code, 0) << ref.err;
  const std::map<int64_t, double> want = LossesByStep(JsonLines(ref.out), 0);
  ASSERT_EQ(want.size(), static_cast<size_t>(kSteps));

  std::vector<std::string> sets = FaultJob(cluster_->dir() / "ck");
  sets.push_back("restart.min_dp=1");
  sets.push_back("restart.elastic_wait_s=1");
  const std::string id = cluster_->Submit(kTinyJob, sets);
  ASSERT_FALSE(id.empty());
  auto follow = cluster_->Follow(id, "elastic.jsonl");
  ASSERT_TRUE(follow->WaitFor([](const json& e) { return IsStepOfAttempt(e, 1, 12); }, 300000));
  // kill -9 of the worker that holds rank 1, and of that rank.
  std::string lost;
  std::map<int, pid_t> on_lost;
  for (const char* w : {"w1", "w2"}) {
    const std::map<int, pid_t> pids = RankPids(follow->Events(), 1, w);
    if (pids.count(1) == 1) {
      lost = w;
      on_lost = pids;
    }
  }
  ASSERT_FALSE(lost.empty()) << "no RUNNING event of rank 1";
  ASSERT_EQ(on_lost.size(), 1u);
  cluster_->KillWorker(lost);
  for (const auto& [rank, pid] : on_lost) kill(pid, SIGKILL);
  const std::vector<json> events = follow->WaitEnd();

  const json job = cluster_->Get(id);
  EXPECT_EQ(job.value("state", ""), "SUCCEEDED");
  EXPECT_EQ(job.value("attempt", 0), 2);
  EXPECT_EQ(job.value("world_size", 0), 1) << job.dump();
  bool said_elastic = false;
  for (const json& e : OfKind(events, "job_state", 2)) {
    if (e.at("job_state").value("reason", "").find("grad_accum_steps=2") != std::string::npos) said_elastic = true;
  }
  EXPECT_TRUE(said_elastic) << "no event of attempt 2 says it runs at dp=1 with grad_accum_steps=2";
  const std::map<int64_t, double> after = LossesByStep(events, 2);
  ASSERT_FALSE(after.empty());
  EXPECT_EQ(after.rbegin()->first, kSteps);
  for (const auto& [step, loss] : after) {
    EXPECT_NEAR(loss, want.at(step), 1e-4 * std::abs(want.at(step))) << "step " << step;
  }
}

// A worker stopped (SIGSTOP) past the heartbeat timeout and the reconnect window is lost
// and its attempt fails (restart 1 of 1); continued, it registers again still running
// the old ranks, which the controller cancels. They need a moment to die, so the
// restart (and the job queued behind it, which no fault touched) must not be placed on
// their slots until the worker reports them gone: no refused assignment, no restart
// spent on one, the worker not blamed a second time.
TEST_F(FaultTest, AWorkerBackFromBeingLostGetsNoRanksOnSlotsItsOldRanksStillHold) {
  // Rank 1 stalls before step 8 of attempt 1 (a test hook), so attempt 1 still runs when
  // its worker comes back; attempt 2 passes it.
  StartCluster({{"w1", 2, {"TRAINYARD_TEST_STALL_RANK=1", "TRAINYARD_TEST_STALL_AT_STEP=8"}}});
  std::vector<std::string> sets = FaultJob(cluster_->dir() / "ck");
  sets.push_back("restart.max_restarts=1");
  sets.push_back("parallelism.collective_timeout_s=300");  // rank 0 waits out the stall
  const std::string a = cluster_->Submit(kTinyJob, sets);
  ASSERT_FALSE(a.empty());
  auto follow_a = cluster_->Follow(a, "returning-a.jsonl");
  ASSERT_TRUE(follow_a->WaitFor([](const json& e) { return IsStepOfAttempt(e, 1, 5); }, 300000));
  // Queued behind it, never hit by the fault; 5 steps, so the hook's step 8 is never reached.
  const std::string b = cluster_->Submit(
      kTinyJob, {"parallelism.dp=2", "parallelism.ep=2", "training.steps=5", "restart.max_restarts=0"});
  ASSERT_FALSE(b.empty());
  ASSERT_EQ(cluster_->Get(b).value("state", ""), "PENDING");
  auto follow_b = cluster_->Follow(b, "returning-b.jsonl");

  cluster_->SignalWorker("w1", SIGSTOP);
  const bool lost = follow_a->WaitFor(
      [](const json& e) {
        return e.contains("job_state") && e.at("job_state").value("state", "") == "RESTARTING" &&
               e.at("job_state").value("reason", "").find("worker w1 lost") != std::string::npos;
      },
      60000).has_value();
  cluster_->SignalWorker("w1", SIGCONT);
  ASSERT_TRUE(lost) << "w1 was never declared lost";
  const std::vector<json> events_a = follow_a->WaitEnd();
  const std::vector<json> events_b = follow_b->WaitEnd();

  const json job_a = cluster_->Get(a);
  EXPECT_EQ(job_a.value("state", ""), "SUCCEEDED") << job_a.dump();
  EXPECT_EQ(job_a.value("attempt", 0), 2);
  const json causes = job_a.value("failure_causes", json::array());
  ASSERT_EQ(causes.size(), 1u) << "only the loss: " << causes.dump();
  EXPECT_NE(causes[0].get<std::string>().find("worker w1 lost"), std::string::npos) << causes.dump();
  const json job_b = cluster_->Get(b);
  EXPECT_EQ(job_b.value("state", ""), "SUCCEEDED") << job_b.dump();
  EXPECT_EQ(job_b.value("attempt", 0), 1);
  EXPECT_TRUE(job_b.value("failure_causes", json::array()).empty()) << job_b.dump();
  for (const auto* events : {&events_a, &events_b}) {
    for (const json& e : *events) {
      const std::string text = e.dump();
      EXPECT_EQ(text.find("assign needs"), std::string::npos) << "a refused assignment: " << text;
      EXPECT_EQ(text.find("refused rank"), std::string::npos) << text;
      EXPECT_EQ(text.find("(2 failures)"), std::string::npos) << "w1 blamed twice: " << text;
    }
  }
  EXPECT_EQ(ReadFileOrEmpty(cluster_->dir() / "worker-w1.log").find("assign needs"), std::string::npos);
}

// `trainyard resize JOB --dp 1` restarts a running dp=2 job from its newest checkpoint on
// one rank with grad_accum_steps=2, without using a restart (max_restarts=0).
TEST_F(FaultTest, AResizedJobContinuesFromItsCheckpointAtTheNewDp) {
  // Rank 1 stalls before step 8 of attempt 1 (a test hook), so the tiny job is still
  // running, past its step-5 checkpoint, when it is resized.
  StartCluster({{"w1", 2, {"TRAINYARD_TEST_STALL_RANK=1", "TRAINYARD_TEST_STALL_AT_STEP=8"}}});
  std::vector<std::string> sets = FaultJob(cluster_->dir() / "ck");
  sets.push_back("restart.max_restarts=0");
  const std::string id = cluster_->Submit(kTinyJob, sets);
  ASSERT_FALSE(id.empty());
  auto follow = cluster_->Follow(id, "resize.jsonl");
  ASSERT_TRUE(follow->WaitFor([](const json& e) { return e.contains("checkpoint"); }, 300000))
      << "attempt 1 never saved a checkpoint";
  ASSERT_TRUE(follow->WaitFor([](const json& e) { return IsStepOfAttempt(e, 1, 7); }, 300000));
  const CommandResult resized = cluster_->Cli({"resize", id, "--dp", "1"});
  ASSERT_EQ(resized.exit_code, 0) << resized.err;
  const std::vector<json> events = follow->WaitEnd();

  const json job = cluster_->Get(id);
  EXPECT_EQ(job.value("state", ""), "SUCCEEDED") << job.dump();
  EXPECT_EQ(job.value("attempt", 0), 2);
  EXPECT_EQ(job.value("world_size", 0), 1);
  bool placed = false;
  for (const json& e : OfKind(events, "job_state", 2)) {
    if (e.at("job_state").value("reason", "").find("dp=1 of 2, grad_accum_steps=2") != std::string::npos) placed = true;
  }
  EXPECT_TRUE(placed) << "no event of attempt 2 says it runs at dp=1 with grad_accum_steps=2";
  std::vector<int64_t> saved;
  for (const json& e : OfKind(events, "checkpoint", 1)) saved.push_back(JsonInt(e.at("checkpoint").at("step")));
  ASSERT_FALSE(saved.empty());
  const int64_t resumed = ResumedFrom(events, 2);
  EXPECT_TRUE(std::find(saved.begin(), saved.end(), resumed) != saved.end()) << "resumed from step " << resumed;
  // Steps both attempts ran agree: one rank with two micro-batches trains as two did.
  const std::map<int64_t, double> first = LossesByStep(events, 1);
  const std::map<int64_t, double> second = LossesByStep(events, 2);
  EXPECT_EQ(second.rbegin()->first, kSteps);
  for (const auto& [step, loss] : second) {
    if (first.count(step)) EXPECT_NEAR(loss, first.at(step), 1e-4 * std::abs(loss)) << "step " << step;
  }
}

// A job started from a --save-init export has the exporting run's step-1 loss; one
// started from another seed's export has the loss `trainyard-train --load` gives for
// that export (and not its own seed's), so the comparison can fail.
TEST_F(FaultTest, InitialLoadPathStartsFromTheExportedWeights) {
  StartCluster({{"w1", 1, {}}});
  auto train = [&](const std::string& seed, const std::string& flag, const fs::path& file) {
    const CommandResult r = RunCommand({TRAINYARD_TRAIN, kDebugJob, "--json", "--set", "training.steps=1", "--set",
                                        "training.seed=" + seed, flag, file.string()});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    const std::map<int64_t, double> losses = LossesByStep(JsonLines(r.out), 0);
    return losses.count(1) ? losses.at(1) : NAN;
  };
  const fs::path w7 = cluster_->dir() / "seed7.safetensors";
  const fs::path w9 = cluster_->dir() / "seed9.safetensors";
  const double exported7 = train("7", "--save-init", w7);
  train("9", "--save-init", w9);
  const double seed7_from_w9 = train("7", "--load", w9);
  ASSERT_FALSE(std::isnan(exported7));
  ASSERT_FALSE(std::isnan(seed7_from_w9));
  ASSERT_GT(std::abs(exported7 - seed7_from_w9), 1e-4) << "the two exports give the same loss: the test cannot fail";

  auto job_loss = [&](const fs::path& init, const std::string& name) {
    const std::map<int64_t, double> losses =
        LossesByStep(RunToEnd({"training.steps=1", "training.seed=7", "checkpoint.initial_load_path=" + init.string()},
                              name),
                     1);
    return losses.count(1) ? losses.at(1) : NAN;
  };
  EXPECT_NEAR(job_loss(w7, "from-seed7"), exported7, 1e-6 * std::abs(exported7));
  EXPECT_NEAR(job_loss(w9, "from-seed9"), seed7_from_w9, 1e-6 * std::abs(seed7_from_w9));
}

}  // namespace
}  // namespace trainyard::testing
