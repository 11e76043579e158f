// Checkpoint retention with real trainyard-rank processes (tiny model): with
// checkpoint.keep_best every checkpoint carries the validation loss of its own step
// (a validation runs at each saved step, also off validation.freq), the folder ends
// holding exactly the newest checkpoint and the K lowest validation losses as the run's
// Validation events report them, the CheckpointsPruned events account for every
// removal and for the bytes left, and export's --best choice is the lowest loss (the
// tiny model's validation loss falls at every checkpoint, so here the best are also the
// newest; PlanRetention's own test covers best ones that are not). A
// rank killed (SIGKILL, TRAINYARD_TEST_KILL_IN_PRUNE) in the middle of a removal leaves
// a .deleting-* folder that no loader sees; the resumed run finishes it and trains on
// bit for bit.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/worker/engine/rank_harness.h"
#include "worker/engine/checkpoint/checkpoint_export.h"
#include "worker/engine/checkpoint/checkpoint_layout.h"
#include "worker/engine/checkpoint/checkpoint_retention.h"

namespace trainyard::engine {
namespace {

namespace fs = std::filesystem;
using testing::FreePort;
using testing::ReadRankEvents;
using testing::SpawnRank;
using testing::WaitExit;

std::string Prefix() { return ::testing::TempDir() + "ckretain_" + std::to_string(::getpid()) + "_"; }

struct RetentionRun {
  int dp = 1, ep = 1;
  int steps = 20;
  int interval = 2;
  int keep = 1;
  int keep_best = 3;
  double lr = 3e-3;
  std::string root;
};

EngineConfig Spec(const RetentionRun& r) {
  EngineConfig c = testing::TinySpec();
  c.job.name = "retain";
  c.training.steps = r.steps;
  c.training.lr = r.lr;
  c.parallelism.dp = r.dp;
  c.parallelism.ep = r.ep;
  c.validation.dataset = "synthetic";
  c.validation.freq = 5;  // off the checkpoint interval: steps 2, 4, 6, 8 validate for their checkpoint
  c.validation.steps = 2;
  c.checkpoint.interval = r.interval;
  c.checkpoint.keep = r.keep;
  c.checkpoint.keep_best = r.keep_best;
  c.checkpoint.dir = r.root;
  return c;
}

// Runs every rank to the end (or its death); returns rank 0's events file and exit codes.
std::string RunRanks(const RetentionRun& r, const std::string& tag, std::vector<int>* exits,
                     const std::vector<std::string>& extra = {}) {
  const std::string config = testing::WriteSpec(Prefix() + tag + ".json", Spec(r));
  const int port = FreePort();
  std::vector<pid_t> pids;
  for (int rank = 0; rank < r.dp; ++rank) {
    pids.push_back(SpawnRank(config, rank, r.dp, port, Prefix() + tag + "_r" + std::to_string(rank) + ".jsonl", extra));
  }
  for (pid_t pid : pids) exits->push_back(WaitExit(pid));
  return Prefix() + tag + "_r0.jsonl";
}

std::set<int64_t> StepsOnDisk(const std::string& root) {
  std::set<int64_t> out;
  for (const auto& d : ListCheckpointDirs(root)) out.insert(d.step);
  return out;
}

TEST(CheckpointRetentionRanksTest, KeepsTheNewestAndTheBestByTheValidationEvents) {
  RetentionRun r;
  r.dp = 2;
  r.ep = 2;
  r.root = Prefix() + "best_ck";
  fs::remove_all(r.root);
  std::vector<int> exits;
  const std::vector<v1::Event> events = ReadRankEvents(RunRanks(r, "best", &exits));
  ASSERT_EQ(exits, (std::vector<int>{0, 0})) << testing::LastError(events);

  std::map<int64_t, double> validation;  // step -> loss, from the Validation events
  std::map<int64_t, v1::CheckpointSaved> saved;
  std::set<std::string> removed;
  const v1::CheckpointsPruned* last_prune = nullptr;
  for (const v1::Event& e : events) {
    if (e.has_validation()) validation[e.validation().step()] = e.validation().loss();
    if (e.has_checkpoint()) saved[e.checkpoint().step()] = e.checkpoint();
    if (e.has_checkpoints_pruned()) {
      for (const auto& ref : e.checkpoints_pruned().removed()) EXPECT_TRUE(removed.insert(ref.path()).second);
      last_prune = &e.checkpoints_pruned();
    }
  }
  ASSERT_EQ(saved.size(), 10u);
  // Each checkpoint carries the loss of the validation at its own step.
  std::vector<std::pair<double, int64_t>> ranked;  // (loss, step), finite only
  for (const auto& [step, ck] : saved) {
    ASSERT_TRUE(validation.count(step)) << "no validation at checkpoint step " << step;
    EXPECT_EQ(ck.metric_name(), "val_loss");
    if (std::isnan(validation.at(step))) {
      EXPECT_TRUE(std::isnan(ck.metric()));
    } else {
      EXPECT_EQ(ck.metric(), validation.at(step)) << "step " << step;
      ranked.push_back({validation.at(step), -step});  // of equal losses the newer first
    }
  }
  EXPECT_FALSE(validation.count(3)) << "no extra validation off the checkpoint steps";
  ASSERT_FALSE(ranked.empty()) << "every validation loss was NaN";
  std::sort(ranked.begin(), ranked.end());
  std::set<int64_t> expected = {r.steps};
  for (size_t i = 0; i < ranked.size() && i < 3; ++i) expected.insert(-ranked[i].second);
  EXPECT_EQ(StepsOnDisk(r.root), expected);

  // Every saved checkpoint that is gone was reported removed, and only those.
  for (const auto& [step, ck] : saved) {
    EXPECT_EQ(removed.count(ck.path()) > 0, expected.count(step) == 0) << "step " << step;
    if (expected.count(step)) {
      const CheckpointManifest m = ReadVerifiedManifest(ck.path());
      ASSERT_TRUE(m.metric.has_value());
      EXPECT_EQ(m.metric->value, ck.metric()) << "the manifest records what the event says";
    }
  }
  ASSERT_NE(last_prune, nullptr);
  EXPECT_EQ(last_prune->kept(), static_cast<int>(expected.size()));
  EXPECT_EQ(last_prune->bytes_kept(), DirectoryBytes(r.root));
  EXPECT_GT(last_prune->bytes_freed(), 0);

  absl::StatusOr<std::string> best = SelectBestCheckpoint(r.root);
  ASSERT_TRUE(best.ok()) << best.status();
  EXPECT_EQ(*best, saved.at(-ranked.front().second).path());
  fs::remove_all(r.root);
}

TEST(CheckpointRetentionRanksTest, AKillMidDeletionIsFinishedByTheResumedRun) {
  RetentionRun r;
  r.interval = 5;
  r.keep = 1;
  r.keep_best = 0;
  r.root = Prefix() + "kill_ck";
  fs::remove_all(r.root);
  std::vector<int> exits;
  RetentionRun ref = r;
  ref.root = Prefix() + "kill_ref_ck";
  fs::remove_all(ref.root);
  const std::map<int, double> want = testing::LossesByStep(ReadRankEvents(RunRanks(ref, "kill_ref", &exits)));
  ASSERT_EQ(exits, (std::vector<int>{0}));

  exits.clear();
  ::setenv("TRAINYARD_TEST_KILL_IN_PRUNE", "1", 1);
  const std::vector<v1::Event> killed = ReadRankEvents(RunRanks(r, "kill", &exits));
  ::unsetenv("TRAINYARD_TEST_KILL_IN_PRUNE");
  ASSERT_EQ(exits, (std::vector<int>{128 + SIGKILL}));
  // Step 10's save pruned step 5: renamed, its manifest removed, then the kill.
  const fs::path leftover = fs::path(r.root) / (std::string(kDeletingPrefix) + CheckpointDirName(5, 1));
  EXPECT_TRUE(fs::is_directory(leftover));
  EXPECT_FALSE(fs::exists(leftover / kManifestName));
  EXPECT_EQ(StepsOnDisk(r.root), (std::set<int64_t>{10}));
  const std::string latest = FindLatestCheckpoint(r.root);
  ASSERT_EQ(latest, (fs::path(r.root) / CheckpointDirName(10, 1)).string());

  exits.clear();
  const std::vector<v1::Event> resumed =
      ReadRankEvents(RunRanks(r, "kill_resume", &exits, {"--resume", latest, "--attempt", "2"}));
  ASSERT_EQ(exits, (std::vector<int>{0})) << testing::LastError(resumed);
  EXPECT_FALSE(fs::exists(leftover)) << "finished when the resumed rank's writer started";
  EXPECT_EQ(StepsOnDisk(r.root), (std::set<int64_t>{20}));
  const std::map<int, double> got = testing::LossesByStep(resumed);
  for (int s = 11; s <= r.steps; ++s) {
    ASSERT_TRUE(got.count(s) && want.count(s)) << "step " << s;
    EXPECT_EQ(got.at(s), want.at(s)) << "step " << s;
  }
  fs::remove_all(r.root);
  fs::remove_all(ref.root);
}

}  // namespace
}  // namespace trainyard::engine
