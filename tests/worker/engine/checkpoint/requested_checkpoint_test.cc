// "Checkpoint now" with real trainyard-rank processes on loopback (tiny model, dp=2
// ep=2, 12 steps): a request file in one rank's run dir makes every rank save once,
// after the first step it runs, with checkpoint.interval = 0; the event says
// requested; the losses are the uninterrupted run's bit for bit, and so are those of a
// resume from the requested checkpoint. A request file older than the rank's config is
// stale and removed at start; an interval step that is also requested saves once; the
// test hook TRAINYARD_TEST_HANG_REQUESTED_CHECKPOINT holds the requested write until
// the ranks are killed (attempt 1 only).
//
// The ranks consume a request at the first step they run. A run resumed from the
// reference run's step-S checkpoint, with the request file created before its ranks
// start, therefore asks at step S+1 (deterministically), and that resume is itself
// bit-identical to the uninterrupted run (checkpoint_resume_test).
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "tests/worker/engine/rank_harness.h"
#include "worker/engine/checkpoint/checkpoint_layout.h"

namespace trainyard::engine {
namespace {

namespace fs = std::filesystem;
using testing::FreePort;
using testing::ReadRankEvents;
using testing::SpawnRank;
using testing::WaitExit;

constexpr int kSteps = 12;
constexpr int kWorld = 2;  // dp=2 ep=2

std::string Prefix() { return ::testing::TempDir() + "ckrequest_" + std::to_string(::getpid()) + "_"; }

// One run of the dp=2 ep=2 job: every rank gets its own run dir (as ranks on two
// workers do) under Prefix()+tag.
struct RankRun {
  std::string tag;
  int interval = 0;
  std::string ckdir;
  std::string resume;  // "" : from step 1
  int attempt = 1;
  std::vector<int> request_ranks;  // a request file in these ranks' run dirs before start
  bool stale = false;              // ... dated an hour before the config
};

std::string RunDir(const std::string& tag, int rank) { return Prefix() + tag + "_run" + std::to_string(rank); }
std::string RequestFile(const std::string& tag, int rank) { return RunDir(tag, rank) + "/checkpoint.request"; }
std::string EventsFile(const std::string& tag, int rank) {
  return Prefix() + tag + "_r" + std::to_string(rank) + ".jsonl";
}

std::vector<pid_t> Start(const RankRun& r) {
  EngineConfig c = testing::TinySpec();
  c.job.name = "ckreq";
  c.training.steps = kSteps;
  c.training.batch_size = 4;
  c.training.log_freq = 1;
  c.parallelism.dp = 2;
  c.parallelism.ep = 2;
  c.checkpoint.interval = r.interval;
  c.checkpoint.keep = 3;
  c.checkpoint.dir = r.ckdir;
  const std::string config = testing::WriteSpec(Prefix() + r.tag + ".json", c);
  for (int rank = 0; rank < kWorld; ++rank) {
    fs::remove_all(RunDir(r.tag, rank));
    fs::create_directories(RunDir(r.tag, rank));
  }
  // After the config: a fresh request (as the worker's, which comes once the ranks run).
  for (int rank : r.request_ranks) {
    std::ofstream(RequestFile(r.tag, rank)) << "test\n";
    if (r.stale) fs::last_write_time(RequestFile(r.tag, rank), fs::last_write_time(config) - std::chrono::hours(1));
  }
  std::vector<std::string> extra = {"--attempt", std::to_string(r.attempt)};
  if (!r.resume.empty()) extra.insert(extra.end(), {"--resume", r.resume});
  const int port = FreePort();
  std::vector<pid_t> pids;
  for (int rank = 0; rank < kWorld; ++rank) {
    std::vector<std::string> flags = extra;
    flags.insert(flags.end(), {"--run-dir", RunDir(r.tag, rank)});
    pids.push_back(SpawnRank(config, rank, kWorld, port, EventsFile(r.tag, rank), flags));
  }
  return pids;
}

// Runs every rank to the end; returns rank 0's events.
std::vector<v1::Event> RunAll(const RankRun& r) {
  for (pid_t pid : Start(r)) EXPECT_EQ(WaitExit(pid), 0) << r.tag;
  return ReadRankEvents(EventsFile(r.tag, 0));
}

std::vector<v1::CheckpointSaved> Saved(const std::vector<v1::Event>& events) {
  std::vector<v1::CheckpointSaved> saved;
  for (const v1::Event& e : events) {
    if (e.has_checkpoint()) saved.push_back(e.checkpoint());
  }
  return saved;
}

bool Logged(const std::vector<v1::Event>& events, const std::string& text) {
  for (const v1::Event& e : events) {
    if (e.has_log() && e.log().message().find(text) != std::string::npos) return true;
  }
  return false;
}

// (step, attempt, complete) of every checkpoint directory under root.
std::vector<std::tuple<int64_t, int, bool>> Dirs(const std::string& root) {
  std::vector<std::tuple<int64_t, int, bool>> dirs;
  for (const CheckpointDirEntry& d : ListCheckpointDirs(root)) dirs.emplace_back(d.step, d.attempt, d.complete);
  return dirs;
}

// The uninterrupted run, with a checkpoint every 4 steps and no request (shared).
class RequestedCheckpointTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = Prefix() + "ref_ck";
    fs::remove_all(root_);
    RankRun r;
    r.tag = "ref";
    r.interval = 4;
    r.ckdir = root_;
    events_ = RunAll(r);
    losses_ = testing::LossesByStep(events_);
  }
  static std::string StepDir(const std::string& root, int step, int attempt) {
    return (fs::path(root) / CheckpointDirName(step, attempt)).string();
  }
  // Steps from..kSteps of `got` equal the uninterrupted run's, bit for bit.
  static void ExpectReferenceLosses(const std::map<int, double>& got, int from, const std::string& what) {
    ASSERT_EQ(got.size(), size_t(kSteps - from + 1)) << what;
    for (int s = from; s <= kSteps; ++s) {
      ASSERT_TRUE(got.count(s)) << what << " has no step " << s;
      EXPECT_EQ(got.at(s), losses_.at(s)) << what << " step " << s;
    }
  }

  static std::string root_;
  static std::vector<v1::Event> events_;
  static std::map<int, double> losses_;
};
std::string RequestedCheckpointTest::root_;
std::vector<v1::Event> RequestedCheckpointTest::events_;
std::map<int, double> RequestedCheckpointTest::losses_;

TEST_F(RequestedCheckpointTest, ReferenceRunSavesOnlyOnTheInterval) {
  ASSERT_EQ(losses_.size(), size_t(kSteps));
  EXPECT_LT(losses_.at(kSteps), losses_.at(1) - 0.05);  // it trained, so equality means something
  std::vector<int64_t> steps;
  for (const v1::CheckpointSaved& c : Saved(events_)) {
    steps.push_back(c.step());
    EXPECT_FALSE(c.requested()) << c.step();
  }
  EXPECT_EQ(steps, (std::vector<int64_t>{4, 8, 12}));
}

// Only rank 1 (another worker, say) was asked; both ranks save after the same step.
TEST_F(RequestedCheckpointTest, RequestOnOneRankSavesOnceOnEveryRankWithIntervalZero) {
  RankRun r;
  r.tag = "asked";
  r.ckdir = Prefix() + "asked_ck";
  fs::remove_all(r.ckdir);
  r.resume = StepDir(root_, 4, 1);
  r.attempt = 2;
  r.request_ranks = {1};
  const std::vector<v1::Event> events = RunAll(r);
  ExpectReferenceLosses(testing::LossesByStep(events), 5, "requested at step 5");

  // Exactly one checkpoint, after step 5 (the first step of this run), complete, with
  // both ranks' files; interval 0 wrote nothing else.
  EXPECT_EQ(Dirs(r.ckdir), (std::vector<std::tuple<int64_t, int, bool>>{{5, 2, true}}));
  const std::string step5 = StepDir(r.ckdir, 5, 2);
  const CheckpointManifest m = ReadVerifiedManifest(step5);
  EXPECT_EQ(m.step, 5);
  EXPECT_EQ(m.optimizer_step, 5);
  ASSERT_EQ(m.files.size(), size_t(kWorld));
  EXPECT_EQ(m.files[1].name, RankFileName(1));
  const std::vector<v1::CheckpointSaved> saved = Saved(events);
  ASSERT_EQ(saved.size(), 1u);
  EXPECT_EQ(saved[0].step(), 5);
  EXPECT_TRUE(saved[0].requested());
  EXPECT_EQ(saved[0].path(), step5);
  EXPECT_EQ(saved[0].bytes(), m.total_bytes);
  EXPECT_TRUE(Logged(events, "checkpoint requested: saving after step 5"));
  EXPECT_TRUE(Saved(ReadRankEvents(EventsFile(r.tag, 1))).empty()) << "only rank 0 reports";
  // The request was consumed; rank 0 never had one.
  EXPECT_FALSE(fs::exists(RequestFile(r.tag, 1)));
  EXPECT_FALSE(fs::exists(RequestFile(r.tag, 0)));

  // Resuming from the requested checkpoint repeats the uninterrupted run's steps 6..12.
  RankRun again;
  again.tag = "after_asked";
  again.ckdir = Prefix() + "after_asked_ck";
  fs::remove_all(again.ckdir);
  again.resume = step5;
  again.attempt = 3;
  const std::vector<v1::Event> resumed = RunAll(again);
  ExpectReferenceLosses(testing::LossesByStep(resumed), 6, "resumed from the requested checkpoint");
  EXPECT_TRUE(Saved(resumed).empty());
  EXPECT_TRUE(Dirs(again.ckdir).empty()) << "interval 0 and no request: no checkpoint";
}

TEST_F(RequestedCheckpointTest, StaleRequestFileIsRemovedAtStart) {
  RankRun r;
  r.tag = "stale";
  r.ckdir = Prefix() + "stale_ck";
  fs::remove_all(r.ckdir);
  r.resume = StepDir(root_, 4, 1);
  r.attempt = 2;
  r.request_ranks = {0};
  r.stale = true;
  const std::vector<v1::Event> events = RunAll(r);
  ExpectReferenceLosses(testing::LossesByStep(events), 5, "with a stale request file");
  EXPECT_TRUE(Saved(events).empty());
  EXPECT_TRUE(Dirs(r.ckdir).empty());
  EXPECT_FALSE(fs::exists(RequestFile(r.tag, 0)));
  EXPECT_TRUE(Logged(events, "removed a stale checkpoint request"));
}

TEST_F(RequestedCheckpointTest, IntervalStepThatIsAlsoRequestedSavesOnce) {
  RankRun r;
  r.tag = "both";
  r.ckdir = Prefix() + "both_ck";
  fs::remove_all(r.ckdir);
  r.interval = 3;  // step 9, the first of this run, is an interval step too
  r.resume = StepDir(root_, 8, 1);
  r.attempt = 2;
  r.request_ranks = {0};
  const std::vector<v1::Event> events = RunAll(r);
  ExpectReferenceLosses(testing::LossesByStep(events), 9, "interval and request at step 9");
  const std::vector<v1::CheckpointSaved> saved = Saved(events);
  ASSERT_EQ(saved.size(), 2u);
  EXPECT_EQ(saved[0].step(), 9);
  EXPECT_TRUE(saved[0].requested());
  EXPECT_EQ(saved[1].step(), 12);
  EXPECT_FALSE(saved[1].requested());
  EXPECT_EQ(Dirs(r.ckdir), (std::vector<std::tuple<int64_t, int, bool>>{{9, 2, true}, {12, 2, true}}));
}

TEST_F(RequestedCheckpointTest, HangHookHoldsTheRequestedWriteUntilKilledInAttemptOneOnly) {
  RankRun r;
  r.tag = "hang";
  r.ckdir = Prefix() + "hang_ck";
  fs::remove_all(r.ckdir);
  r.resume = StepDir(root_, 4, 1);
  r.attempt = 1;
  r.request_ranks = {0};
  ::setenv("TRAINYARD_TEST_HANG_REQUESTED_CHECKPOINT", "1", 1);
  const std::vector<pid_t> pids = Start(r);
  ::unsetenv("TRAINYARD_TEST_HANG_REQUESTED_CHECKPOINT");
  auto hung = [&](int rank) {
    return Logged(ReadRankEvents(EventsFile(r.tag, rank)), "test hook: requested checkpoint write hung at step 5");
  };
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (!(hung(0) && hung(1)) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const bool both_hung = hung(0) && hung(1);
  const std::string step5 = StepDir(r.ckdir, 5, 1);
  // Each writer stops inside its temporary file, so no manifest can come; the ranks
  // wait for their writes and never exit on their own.
  EXPECT_TRUE(fs::exists(fs::path(step5) / (RankFileName(0) + ".tmp")));
  EXPECT_FALSE(fs::exists(fs::path(step5) / kManifestName));
  for (pid_t pid : pids) ::kill(pid, SIGKILL);
  for (pid_t pid : pids) EXPECT_EQ(WaitExit(pid), 128 + SIGKILL);
  ASSERT_TRUE(both_hung) << "the writers never reached the hook";
  EXPECT_FALSE(fs::exists(fs::path(step5) / kManifestName));
  EXPECT_TRUE(Saved(ReadRankEvents(EventsFile(r.tag, 0))).empty());

  // A later attempt (the restart after the kill) is not held.
  RankRun later = r;
  later.tag = "hang_later";
  later.attempt = 2;
  ::setenv("TRAINYARD_TEST_HANG_REQUESTED_CHECKPOINT", "1", 1);
  const std::vector<pid_t> later_pids = Start(later);
  ::unsetenv("TRAINYARD_TEST_HANG_REQUESTED_CHECKPOINT");
  for (pid_t pid : later_pids) EXPECT_EQ(WaitExit(pid), 0);
  const std::vector<v1::CheckpointSaved> saved = Saved(ReadRankEvents(EventsFile(later.tag, 0)));
  ASSERT_EQ(saved.size(), 1u);
  EXPECT_EQ(saved[0].step(), 5);
  EXPECT_TRUE(saved[0].requested());
}

}  // namespace
}  // namespace trainyard::engine
