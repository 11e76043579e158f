// Checkpoint retention without torch (checkpoint_retention.h, checkpoint_pin.h): the
// newest `keep` and the keep_best lowest metrics stay, a NaN or infinite metric is
// never best, pinned and in-progress directories stay, and a removal killed half-way
// (a forked process SIGKILLed by the test hook, or a hook that throws) leaves only a
// .deleting-* folder that no lister sees and the next prune finishes. Bytes freed and
// kept are what the disk says. Also the manifest's metric field, hostile values first.
#include "worker/engine/checkpoint/checkpoint_retention.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "worker/engine/checkpoint/checkpoint_export.h"
#include "worker/engine/checkpoint/checkpoint_layout.h"
#include "worker/engine/checkpoint/checkpoint_pin.h"

namespace trainyard::engine {
namespace {

namespace fs = std::filesystem;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

#define EXPECT_HAS(haystack, needle) \
  EXPECT_NE(std::string(haystack).find(needle), std::string::npos) << "message: " << (haystack)

RetentionCandidate Complete(int64_t step, std::optional<double> metric, int attempt = 1) {
  RetentionCandidate c;
  c.path = "/ck/" + CheckpointDirName(step, attempt);
  c.step = step;
  c.attempt = attempt;
  c.complete = true;
  c.metric = metric;
  return c;
}

std::map<int64_t, RetentionVerdict> ByStep(const std::vector<RetentionCandidate>& dirs,
                                           const std::vector<RetentionVerdict>& v) {
  std::map<int64_t, RetentionVerdict> out;
  for (size_t i = 0; i < dirs.size(); ++i) out[dirs[i].step] = v[i];
  return out;
}

TEST(PlanRetentionTest, KeepsNewestAndLowestFiniteMetrics) {
  // 15 has NaN and 25 +inf: below every finite value in a careless comparison.
  std::vector<RetentionCandidate> dirs = {Complete(5, 3.0),   Complete(10, 2.0), Complete(15, kNaN), Complete(20, 1.5),
                                          Complete(25, kInf), Complete(30, 2.5), Complete(35, -kInf)};
  dirs[6].metric = std::nullopt;  // a checkpoint saved without a metric
  const auto v = ByStep(dirs, PlanRetention(dirs, {1, 2, "val_loss"}, dirs.back().path));
  EXPECT_EQ(v.at(35), RetentionVerdict::kNewest);
  EXPECT_EQ(v.at(20), RetentionVerdict::kBest);
  EXPECT_EQ(v.at(10), RetentionVerdict::kBest);
  for (int64_t s : {5, 15, 25, 30}) EXPECT_EQ(v.at(s), RetentionVerdict::kRemove) << "step " << s;
}

TEST(PlanRetentionTest, BestMayOverlapNewestAndTiesGoToTheNewer) {
  std::vector<RetentionCandidate> dirs = {Complete(5, 1.0), Complete(10, 2.0), Complete(15, 1.0), Complete(20, 0.5)};
  const auto v = ByStep(dirs, PlanRetention(dirs, {1, 2, "val_loss"}, ""));
  EXPECT_EQ(v.at(20), RetentionVerdict::kNewest);  // also the best: counted once
  EXPECT_EQ(v.at(15), RetentionVerdict::kBest);    // 1.0 like step 5, and newer
  EXPECT_EQ(v.at(5), RetentionVerdict::kRemove);
  EXPECT_EQ(v.at(10), RetentionVerdict::kRemove);
}

TEST(PlanRetentionTest, OffKeepsOnlyTheNewestAndHugeKeepsEveryScoredOne) {
  std::vector<RetentionCandidate> dirs = {Complete(5, 0.1), Complete(10, 0.2), Complete(15, kNaN), Complete(20, 0.9)};
  auto off = ByStep(dirs, PlanRetention(dirs, {2, 0, "val_loss"}, ""));
  EXPECT_EQ(off.at(5), RetentionVerdict::kRemove) << "keep_best=0 ignores metrics";
  EXPECT_EQ(off.at(10), RetentionVerdict::kRemove);
  EXPECT_EQ(off.at(15), RetentionVerdict::kNewest);
  auto huge = ByStep(dirs, PlanRetention(dirs, {1, 1000000, "val_loss"}, ""));
  EXPECT_EQ(huge.at(5), RetentionVerdict::kBest);
  EXPECT_EQ(huge.at(10), RetentionVerdict::kBest);
  EXPECT_EQ(huge.at(15), RetentionVerdict::kRemove) << "NaN is never best, however many are kept";
  // keep below 1 still keeps the newest: a resume needs it.
  auto zero = ByStep(dirs, PlanRetention(dirs, {0, 0, "val_loss"}, ""));
  EXPECT_EQ(zero.at(20), RetentionVerdict::kNewest);
  EXPECT_EQ(zero.at(15), RetentionVerdict::kRemove);
}

TEST(PlanRetentionTest, PinnedAndInProgressStay) {
  std::vector<RetentionCandidate> dirs = {Complete(5, 9.0), Complete(10, 9.0), Complete(15, 9.0), Complete(20, 9.0)};
  dirs[0].pinned = true;
  dirs[1].complete = false;  // older than a complete one: a write that died
  dirs[3].complete = false;  // newer than every complete one: being written
  const auto v = ByStep(dirs, PlanRetention(dirs, {1, 0, ""}, ""));
  EXPECT_EQ(v.at(5), RetentionVerdict::kPinned);
  EXPECT_EQ(v.at(10), RetentionVerdict::kRemove);
  EXPECT_EQ(v.at(15), RetentionVerdict::kNewest);
  EXPECT_EQ(v.at(20), RetentionVerdict::kBeingWritten);
}

TEST(PlanRetentionTest, TheJustWrittenOneStaysWhateverItsOrder) {
  // A later attempt resumed from step 10 and wrote step 15 while attempt 1's step 20
  // (complete) is in the folder: the new one is kept beside the newest.
  std::vector<RetentionCandidate> dirs = {Complete(10, 1.0), Complete(15, 1.0, 2), Complete(20, 1.0)};
  const auto v = ByStep(dirs, PlanRetention(dirs, {1, 0, ""}, dirs[1].path));
  EXPECT_EQ(v.at(15), RetentionVerdict::kNewest);
  EXPECT_EQ(v.at(20), RetentionVerdict::kNewest);
  EXPECT_EQ(v.at(10), RetentionVerdict::kRemove);
}

// A root with complete checkpoints (a manifest and one file of `bytes`), on disk.
class PruneTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = ::testing::TempDir() + "retention_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }

  std::string Write(int64_t step, std::optional<double> metric, int64_t bytes = 1000, int attempt = 1,
                    const std::string& metric_name = "val_loss") {
    const std::string dir = (fs::path(root_) / CheckpointDirName(step, attempt)).string();
    fs::create_directories(dir);
    std::ofstream(fs::path(dir) / RankFileName(0), std::ios::binary) << std::string(bytes, 'x');
    CheckpointManifest m;
    m.step = step;
    m.attempt = attempt;
    m.global_batch = 4;
    m.samples_consumed = step * 4;
    m.dataset = "synthetic";
    m.files = {{RankFileName(0), 0, bytes}};
    m.total_bytes = bytes;
    if (metric) m.metric = CheckpointMetric{metric_name, *metric};
    WriteManifestAtomically(dir, m);
    return dir;
  }
  std::vector<int64_t> Steps() const {
    std::vector<int64_t> out;
    for (const auto& d : ListCheckpointDirs(root_)) out.push_back(d.step);
    return out;
  }
  std::vector<std::string> Leftovers() const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(root_)) {
      if (e.path().filename().string().rfind(kDeletingPrefix, 0) == 0) out.push_back(e.path().filename().string());
    }
    return out;
  }

  std::string root_;
};

TEST_F(PruneTest, RemovesWhatThePlanDropsAndCountsTheBytes) {
  Write(5, 3.0, 1000);
  Write(10, 1.0, 2000);
  Write(15, kNaN, 3000);
  const std::string newest = Write(20, 2.0, 4000);
  const int64_t manifest_bytes = DirectoryBytes(newest) - 4000;
  const PruneResult r = PruneCheckpoints(root_, {1, 1, "val_loss"}, 1, newest);
  EXPECT_EQ(Steps(), (std::vector<int64_t>{10, 20}));
  ASSERT_EQ(r.removed.size(), 2u);
  EXPECT_EQ(r.removed[0].step, 5);
  EXPECT_EQ(r.removed[1].step, 15);
  EXPECT_GE(r.removed[0].bytes, 1000 + manifest_bytes - 16) << "file and manifest";
  EXPECT_EQ(r.bytes_freed, r.removed[0].bytes + r.removed[1].bytes);
  EXPECT_EQ(r.bytes_kept, DirectoryBytes(root_ + "/" + CheckpointDirName(10, 1)) + DirectoryBytes(newest));
  EXPECT_EQ(r.kept, 2);
  EXPECT_TRUE(r.failures.empty());
  EXPECT_TRUE(Leftovers().empty());
}

TEST_F(PruneTest, NeverTouchesALaterAttempt) {
  Write(5, 1.0);
  Write(10, 1.0, 1000, 2);
  const std::string mine = Write(8, 1.0);
  PruneCheckpoints(root_, {1, 0, "val_loss"}, 1, mine);
  EXPECT_EQ(Steps(), (std::vector<int64_t>{8, 10}));
}

TEST_F(PruneTest, AKilledRemovalIsFinishedByTheNextPruneAndResumeStillFindsTheNewest) {
  Write(5, 1.0);
  Write(10, 2.0);
  const std::string newest = Write(15, 3.0);
  // A real process, killed (SIGKILL) inside its first removal, after the rename.
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    PruneCheckpoints(root_, {1, 0, "val_loss"}, 1, newest, [](const std::string&) { ::raise(SIGKILL); });
    ::_exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "status " << status;
  EXPECT_EQ(Leftovers(), (std::vector<std::string>{std::string(kDeletingPrefix) + CheckpointDirName(5, 1)}));
  // Nothing lists, selects or loads the half-deleted folder.
  EXPECT_EQ(Steps(), (std::vector<int64_t>{10, 15}));
  EXPECT_EQ(FindLatestCheckpoint(root_), newest);
  absl::StatusOr<std::string> picked = SelectCheckpoint(root_, 5);
  EXPECT_FALSE(picked.ok());
  // The next prune (the resumed job's first save) finishes it, then prunes as usual.
  const std::string next = Write(20, 4.0);
  const PruneResult r = PruneCheckpoints(root_, {1, 0, "val_loss"}, 2, next);
  EXPECT_EQ(r.finished.size(), 1u);
  EXPECT_TRUE(Leftovers().empty());
  EXPECT_EQ(Steps(), (std::vector<int64_t>{20}));
  EXPECT_GT(r.bytes_freed, 3 * 1000) << "the leftover's bytes count as freed too";
}

TEST_F(PruneTest, AThrowingRemovalLeavesOnlyALeftoverThatStartupFinishes) {
  Write(5, 1.0);
  const std::string newest = Write(10, 1.0);
  EXPECT_THROW(
      PruneCheckpoints(root_, {1, 0, ""}, 1, newest, [](const std::string&) { throw std::runtime_error("crash"); }),
      std::runtime_error);
  ASSERT_EQ(Leftovers().size(), 1u);
  EXPECT_FALSE(fs::exists(fs::path(root_) / Leftovers()[0] / kManifestName)) << "the manifest went first";
  int64_t freed = 0;
  EXPECT_EQ(FinishInterruptedDeletions(root_, &freed).size(), 1u);
  EXPECT_EQ(freed, 1000);
  EXPECT_TRUE(Leftovers().empty());
  EXPECT_EQ(Steps(), (std::vector<int64_t>{10}));
}

TEST_F(PruneTest, APinnedCheckpointStaysUntilItsPinGoes) {
  const std::string old = Write(5, 1.0);
  const std::string newest = Write(10, 1.0);
  {
    absl::StatusOr<std::unique_ptr<CheckpointPin>> pin = CheckpointPin::Acquire(old, "export");
    ASSERT_TRUE(pin.ok()) << pin.status();
    EXPECT_TRUE(HasLivePin(old));
    const PruneResult r = PruneCheckpoints(root_, {1, 0, ""}, 1, newest);
    EXPECT_TRUE(r.removed.empty());
    EXPECT_EQ(Steps(), (std::vector<int64_t>{5, 10}));
  }
  EXPECT_FALSE(HasLivePin(old)) << "the pin's destructor removes it";
  PruneCheckpoints(root_, {1, 0, ""}, 1, newest);
  EXPECT_EQ(Steps(), (std::vector<int64_t>{10}));
}

TEST_F(PruneTest, APinOfADeadProcessOnThisHostIsStale) {
  const std::string old = Write(5, 1.0);
  const std::string newest = Write(10, 1.0);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    auto pin = CheckpointPin::Acquire(old, "load-rank-0");
    if (pin.ok()) pin->release();  // leaked: the process dies holding it
    ::_exit(pin.ok() ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_FALSE(fs::is_empty(fs::path(old) / kPinsDirName)) << "the pin file is still there";
  EXPECT_FALSE(HasLivePin(old));
  PruneCheckpoints(root_, {1, 0, ""}, 1, newest);
  EXPECT_EQ(Steps(), (std::vector<int64_t>{10}));
}

TEST_F(PruneTest, APinnedLeftoverIsRestoredNotRemoved) {
  // A pruner that died between its rename and the rename back it owed a reader.
  const std::string old = Write(5, 1.0);
  const std::string newest = Write(10, 1.0);
  absl::StatusOr<std::unique_ptr<CheckpointPin>> pin = CheckpointPin::Acquire(old, "export");
  ASSERT_TRUE(pin.ok()) << pin.status();
  fs::rename(old, fs::path(root_) / (std::string(kDeletingPrefix) + CheckpointDirName(5, 1)));
  int64_t freed = 0;
  EXPECT_TRUE(FinishInterruptedDeletions(root_, &freed).empty());
  EXPECT_EQ(freed, 0);
  EXPECT_TRUE(Leftovers().empty());
  EXPECT_EQ(Steps(), (std::vector<int64_t>{5, 10}));
  EXPECT_TRUE(HasLivePin(old));
  pin->reset();
  // Unpinned, the same leftover is removed.
  fs::rename(old, fs::path(root_) / (std::string(kDeletingPrefix) + CheckpointDirName(5, 1)));
  EXPECT_EQ(FinishInterruptedDeletions(root_, &freed).size(), 1u);
  EXPECT_EQ(Steps(), (std::vector<int64_t>{10}));
}

TEST_F(PruneTest, BestRanksOnlyTheNewestCheckpointsMetric) {
  // A folder reused after best_metric changed: train_loss values are not val_loss ones.
  const std::string best = Write(5, 0.5);
  Write(10, 0.01, 1000, 1, "train_loss");
  Write(15, 0.9);
  absl::StatusOr<std::string> picked = SelectBestCheckpoint(root_);
  ASSERT_TRUE(picked.ok()) << picked.status();
  EXPECT_EQ(*picked, best);
}

TEST_F(PruneTest, PinningADeletedOrIncompleteCheckpointFails) {
  const std::string dir = Write(5, 1.0);
  fs::rename(dir, fs::path(root_) / (std::string(kDeletingPrefix) + CheckpointDirName(5, 1)));
  absl::StatusOr<std::unique_ptr<CheckpointPin>> pin = CheckpointPin::Acquire(dir, "export");
  ASSERT_FALSE(pin.ok());
  EXPECT_EQ(pin.status().code(), absl::StatusCode::kNotFound);
}

TEST(ManifestMetricTest, RoundTripsAndANonFiniteValueReadsAsNaN) {
  CheckpointManifest m;
  m.step = 10;
  m.attempt = 1;
  m.global_batch = 4;
  m.samples_consumed = 40;
  m.dataset = "synthetic";
  m.files = {{RankFileName(0), 0, 100}};
  m.total_bytes = 100;
  EXPECT_FALSE(ParseManifest(ManifestToJson(m), "m").metric.has_value());
  m.metric = CheckpointMetric{"val_loss", 2.5};
  CheckpointManifest back = ParseManifest(ManifestToJson(m), "m");
  ASSERT_TRUE(back.metric.has_value());
  EXPECT_EQ(back.metric->name, "val_loss");
  EXPECT_EQ(back.metric->value, 2.5);
  for (double hostile : {kNaN, kInf, -kInf}) {
    m.metric = CheckpointMetric{"val_loss", hostile};
    const std::string text = ManifestToJson(m);
    EXPECT_HAS(text, "\"value\": null");
    EXPECT_TRUE(std::isnan(ParseManifest(text, "m").metric->value));
  }
}

TEST(ManifestMetricTest, HostileMetricFieldsAreRefusedNamingThem) {
  const std::string base =
      R"({"format":"trainyard-checkpoint-v1","step":10,"attempt":1,"layout":{"dp":1,"tp":1,"ep":1},)"
      R"("optimizer_step":10,"global_batch":4,"samples_consumed":40,"dataset":"synthetic","seed":1,)"
      R"("files":[{"name":"rank-00000.safetensors","rank":0,"bytes":100}],"total_bytes":100,)";
  auto error = [&](const std::string& metric) -> std::string {
    try {
      ParseManifest(base + R"("metric":)" + metric + "}", "m.json");
    } catch (const std::runtime_error& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_HAS(error(R"("low")"), "field \"metric\" must be an object");
  EXPECT_HAS(error(R"({"name":"val_loss","value":"NaN"})"), "metric value must be a number or null, got \"NaN\"");
  EXPECT_HAS(error(R"({"name":"val_loss"})"), "metric value must be a number or null (missing)");
  EXPECT_HAS(error(R"({"name":"","value":1})"), "metric name must be 1 to 64 bytes");
  EXPECT_HAS(error(R"({"value":1})"), "field \"name\" must be a string");
  EXPECT_EQ(error(R"({"name":"val_loss","value":1e308})"), "");
}

}  // namespace
}  // namespace trainyard::engine
