// Checkpoints with real trainyard-rank processes on loopback (tiny model, dp=2 ep=2,
// 20 steps, a checkpoint every 5): a resume at the same layout repeats the
// uninterrupted losses bit for bit; resumes at tp=2 and at one rank with
// grad_accum_steps=2 match them to 1e-5; gradient accumulation matches more DP ranks;
// a writer killed mid-file leaves a checkpoint the loader refuses and the finder skips;
// `keep` prunes; checkpoint.initial_load_path starts from the exported weights.
#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <thread>
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
using testing::ReadRankEvents;
using testing::SpawnRank;
using testing::WaitExit;

constexpr int kSteps = 20;
constexpr int kInterval = 5;

struct RunSpec {
  int dp = 1, tp = 1, ep = 1;
  int batch = 4;  // per DP rank and micro-batch
  int accum = 1;
  int steps = kSteps;
  std::string ckdir;  // "" : no checkpoints
  int keep = 3;
  std::string initial_load;
};

std::string Prefix() { return ::testing::TempDir() + "ckresume_" + std::to_string(::getpid()) + "_"; }

std::string WriteRunSpec(const std::string& path, const RunSpec& r) {
  EngineConfig c = testing::TinySpec();
  c.job.name = "ck";
  c.training.steps = r.steps;
  c.training.batch_size = r.batch;
  c.training.grad_accum_steps = r.accum;
  c.parallelism.dp = r.dp;
  c.parallelism.tp = r.tp;
  c.parallelism.ep = r.ep;
  if (!r.ckdir.empty()) {
    c.checkpoint.interval = kInterval;
    c.checkpoint.keep = r.keep;
    c.checkpoint.dir = r.ckdir;
  }
  c.checkpoint.initial_load_path = r.initial_load;
  return testing::WriteSpec(path, c);
}

// step -> loss from rank 0's events.
std::map<int, double> Losses(const std::string& path) { return testing::LossesByStep(ReadRankEvents(path)); }

std::vector<pid_t> Start(const RunSpec& r, const std::string& tag, const std::vector<std::string>& extra) {
  const std::string config = WriteRunSpec(Prefix() + tag + ".json", r);
  const int world = r.dp * r.tp;
  const int port = FreePort();
  std::vector<pid_t> pids;
  for (int rank = 0; rank < world; ++rank) {
    pids.push_back(SpawnRank(config, rank, world, port, Prefix() + tag + "_r" + std::to_string(rank) + ".jsonl", extra));
  }
  return pids;
}

// Runs every rank to the end; returns rank 0's events file.
std::string RunAll(const RunSpec& r, const std::string& tag, const std::vector<std::string>& extra = {}) {
  for (pid_t pid : Start(r, tag, extra)) EXPECT_EQ(WaitExit(pid), 0) << tag;
  return Prefix() + tag + "_r0.jsonl";
}

std::string LastError(const std::string& events_path) { return testing::LastError(ReadRankEvents(events_path)); }

void ExpectClose(const std::map<int, double>& got, const std::map<int, double>& want, int from, double rel,
                 const std::string& what) {
  for (int s = from; s <= kSteps; ++s) {
    ASSERT_TRUE(got.count(s)) << what << " has no step " << s;
    EXPECT_NEAR(got.at(s), want.at(s), rel * std::abs(want.at(s))) << what << " step " << s;
  }
}

// The uninterrupted dp=2 ep=2 run, with a checkpoint every 5 steps (shared by the tests).
class CheckpointResumeTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = Prefix() + "ref_ck";
    fs::remove_all(root_);
    RunSpec r{2, 1, 2};
    r.ckdir = root_;
    events_ = RunAll(r, "ref");
    losses_ = Losses(events_);
  }
  static std::string Step10() { return (fs::path(root_) / CheckpointDirName(10, 1)).string(); }

  static std::string root_, events_;
  static std::map<int, double> losses_;
};
std::string CheckpointResumeTest::root_;
std::string CheckpointResumeTest::events_;
std::map<int, double> CheckpointResumeTest::losses_;

TEST_F(CheckpointResumeTest, SameLayoutResumeIsBitIdentical) {
  ASSERT_EQ(losses_.size(), size_t(kSteps));
  EXPECT_LT(losses_.at(20), losses_.at(1) - 0.05);  // it trained, so equality means something
  RunSpec r{2, 1, 2};
  r.ckdir = Prefix() + "exact_ck";
  const auto got = Losses(RunAll(r, "exact", {"--resume", Step10(), "--attempt", "2"}));
  EXPECT_EQ(got.begin()->first, 11);
  for (int s = 11; s <= kSteps; ++s) {
    ASSERT_TRUE(got.count(s)) << s;
    EXPECT_EQ(got.at(s), losses_.at(s)) << "step " << s;  // bit for bit
  }
  // The resumed run checkpoints at 15 and 20 with its own attempt.
  EXPECT_EQ(FindLatestCheckpoint(r.ckdir), (fs::path(r.ckdir) / CheckpointDirName(20, 2)).string());
}

TEST_F(CheckpointResumeTest, ResumesUnderTensorParallelism) {
  RunSpec r{1, 2, 1};
  r.batch = 8;  // the same global batch on one DP rank
  ExpectClose(Losses(RunAll(r, "tp2", {"--resume", Step10()})), losses_, 11, 1e-5, "tp=2");
}

TEST_F(CheckpointResumeTest, ResumesOnOneRankWithGradientAccumulation) {
  RunSpec r{1, 1, 1};
  r.accum = 2;
  ExpectClose(Losses(RunAll(r, "one_a2", {"--resume", Step10()})), losses_, 11, 1e-5, "1 rank, A=2");
}

TEST_F(CheckpointResumeTest, RefusesAnotherGlobalBatch) {
  RunSpec r{1, 1, 1};  // 4 samples per step; the checkpoint took 8
  const std::vector<pid_t> pids = Start(r, "other_batch", {"--resume", Step10()});
  EXPECT_EQ(WaitExit(pids[0]), 1);
  const std::string error = LastError(Prefix() + "other_batch_r0.jsonl");
  EXPECT_NE(error.find("was written with 8 samples per step"), std::string::npos) << error;
}

TEST_F(CheckpointResumeTest, KeepPrunesAndEventsDescribeEachSave) {
  std::vector<std::string> left;
  for (const auto& d : ListCheckpointDirs(root_)) {
    EXPECT_TRUE(d.complete) << d.path;
    left.push_back(fs::path(d.path).filename().string());
  }
  EXPECT_EQ(left, (std::vector<std::string>{CheckpointDirName(10, 1), CheckpointDirName(15, 1),
                                            CheckpointDirName(20, 1)}));
  std::vector<int> steps;
  for (const v1::Event& e : ReadRankEvents(events_)) {
    if (!e.has_checkpoint()) continue;
    const v1::CheckpointSaved& c = e.checkpoint();
    steps.push_back(static_cast<int>(c.step()));
    EXPECT_EQ(c.dp(), 2);
    EXPECT_EQ(c.tp(), 1);
    EXPECT_EQ(c.ep(), 2);
    EXPECT_GE(c.blocked_ms(), 0);
    EXPECT_GE(c.write_ms(), 0);
    const std::string path = c.path();
    if (fs::exists(path)) {
      const CheckpointManifest m = ReadVerifiedManifest(path);
      EXPECT_EQ(c.bytes(), m.total_bytes);
      EXPECT_EQ(m.total_bytes, static_cast<int64_t>(fs::file_size(fs::path(path) / RankFileName(0)) +
                                                    fs::file_size(fs::path(path) / RankFileName(1))));
    }
  }
  EXPECT_EQ(steps, (std::vector<int>{5, 10, 15, 20}));
}

TEST(GradAccumTest, OneRankTwoMicroBatchesMatchesTwoDpRanks) {
  RunSpec dp2{2, 1, 1};
  dp2.steps = 8;
  RunSpec a2{1, 1, 1};
  a2.steps = 8;
  a2.accum = 2;
  const auto want = Losses(RunAll(dp2, "accum_dp2"));
  const auto got = Losses(RunAll(a2, "accum_a2"));
  ASSERT_EQ(want.size(), 8u);
  ASSERT_EQ(got.size(), 8u);
  for (int s = 1; s <= 8; ++s) EXPECT_NEAR(got.at(s), want.at(s), 1e-5 * std::abs(want.at(s))) << "step " << s;
  // tokens count the whole global batch: 4 samples x 2 micro-batches x seq 32.
  for (const v1::Event& e : ReadRankEvents(Prefix() + "accum_a2_r0.jsonl")) {
    if (e.has_step_metrics()) {
      EXPECT_EQ(e.step_metrics().tokens(), 4 * 2 * 32);
    }
  }
}

TEST(KilledWriterTest, PausedAndKilledCheckpointIsRefusedAndSkipped) {
  const std::string root = Prefix() + "killed_ck";
  fs::remove_all(root);
  RunSpec r{2, 1, 2};
  r.ckdir = root;
  ::setenv("TRAINYARD_TEST_PAUSE_CHECKPOINT_AT_STEP", "10", 1);
  const std::vector<pid_t> pids = Start(r, "killed", {});
  ::unsetenv("TRAINYARD_TEST_PAUSE_CHECKPOINT_AT_STEP");
  // Wait until both ranks' writers sit inside their step-10 files, then kill -9.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  auto paused = [&](int rank) {
    for (const v1::Event& e : ReadRankEvents(Prefix() + "killed_r" + std::to_string(rank) + ".jsonl")) {
      if (e.has_log() && e.log().message().find("test hook: checkpoint write paused") != std::string::npos) {
        return true;
      }
    }
    return false;
  };
  while (!(paused(0) && paused(1)) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  for (pid_t pid : pids) ::kill(pid, SIGKILL);
  for (pid_t pid : pids) EXPECT_EQ(WaitExit(pid), 128 + SIGKILL);
  const std::string step10 = (fs::path(root) / CheckpointDirName(10, 1)).string();
  ASSERT_TRUE(fs::exists(fs::path(step10) / (RankFileName(0) + ".tmp"))) << "killed inside the write";
  EXPECT_FALSE(fs::exists(fs::path(step10) / kManifestName));
  try {
    ReadVerifiedManifest(step10);
    ADD_FAILURE() << "the incomplete checkpoint verified";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("incomplete: no manifest.json"), std::string::npos) << e.what();
  }
  EXPECT_EQ(FindLatestCheckpoint(root), (fs::path(root) / CheckpointDirName(5, 1)).string());
  // A rank asked to resume from it refuses, naming the directory.
  RunSpec one{1, 1, 1};
  one.batch = 8;
  const std::vector<pid_t> resumed = Start(one, "killed_resume", {"--resume", step10});
  EXPECT_EQ(WaitExit(resumed[0]), 1);
  EXPECT_NE(LastError(Prefix() + "killed_resume_r0.jsonl").find(step10 + ": incomplete"), std::string::npos)
      << LastError(Prefix() + "killed_resume_r0.jsonl");
}

TEST(InitialLoadTest, StartsFromTheExportedWeights) {
  // Weights the seed would not produce (the seed's init, scaled), so the load is what
  // sets the loss.
  const std::string init = Prefix() + "seed_init.safetensors";
  RunSpec one{1, 1, 1};
  one.steps = 1;
  const auto seed_loss = Losses(RunAll(one, "init_seed", {"--save-init", init}));
  std::vector<std::pair<std::string, torch::Tensor>> scaled;
  for (auto& [name, t] : ReadSafetensors(init)) scaled.emplace_back(name, t * 2.0);
  const std::string moved = Prefix() + "scaled.safetensors";
  WriteSafetensors(moved, scaled);
  const std::string exported = Prefix() + "exported.safetensors";
  const auto exporter = Losses(RunAll(one, "init_export", {"--load", moved, "--save-init", exported}));
  RunSpec loader = one;
  loader.initial_load = exported;
  const auto got = Losses(RunAll(loader, "init_load"));
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got.at(1), exporter.at(1));
  EXPECT_GT(std::abs(got.at(1) - seed_loss.at(1)), 1e-3);
}

}  // namespace
}  // namespace trainyard::engine
