// TensorBoard event files of a real job, checked by TensorBoard's own reader
// (tensorboard_check.py, EventAccumulator): a tiny dp=2 ep=2 job with validation, whose
// rank 1 stalls in attempt 1 (a test hook) so the job restarts into attempt 2, run by a
// controller with --tensorboard-dir that is killed (-9) and restarted mid-run. Both the
// controller's live files and `trainyard tensorboard`'s export must hold exactly the
// stored values (read back with `trainyard watch --output json`), one run per attempt.
// Then the CLI's and the controller's refusals: an existing folder, an unknown job, an
// -o that is a file, a --tensorboard-dir that cannot be written.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/support/files.h"
#include "tests/support/test_cluster.h"

namespace trainyard::testing {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

const std::string kTinyJob = TRAINYARD_EXAMPLES "/tiny.toml";

bool IsStepOfAttempt(const json& e, int attempt, int64_t min_step) {
  return e.value("attempt", 0) == attempt && e.contains("step_metrics") &&
         JsonInt(e.at("step_metrics").at("step")) >= min_step;
}

CommandResult Check(const fs::path& events, const fs::path& job, const fs::path& tb_dir, const std::string& id) {
  return RunCommand({"/usr/bin/env", "PYTHONDONTWRITEBYTECODE=1", TRAINYARD_PYTHON,
                     TRAINYARD_SOURCE_DIR "/tests/integration/tensorboard_check.py", events.string(), job.string(),
                     tb_dir.string(), id});
}

TEST(TensorBoardTest, EveryAttemptsScalarsAndSpecMatchTheStoreInTensorBoardsReader) {
  TestCluster cluster(kBuiltBinaries, "tensorboard");
  const fs::path live = cluster.dir() / "tb-live";
  ASSERT_TRUE(cluster.StartController({"--tensorboard-dir", live.string(), "--tensorboard-flush", "0.2"}))
      << "see " << cluster.dir() / "controller.log";
  WorkerOptions w;
  w.name = "w1";
  w.slots = 2;
  w.env = {"TRAINYARD_TEST_STALL_RANK=1", "TRAINYARD_TEST_STALL_AT_STEP=7"};
  cluster.StartWorker(w);
  ASSERT_TRUE(cluster.WaitConnected({"w1"}, 30000));

  const std::string id = cluster.Submit(
      kTinyJob, {"parallelism.dp=2", "parallelism.ep=2", "parallelism.collective_timeout_s=3", "training.steps=10",
                 "checkpoint.interval=2", "checkpoint.dir=" + (cluster.dir() / "ck").string(),
                 "restart.max_restarts=1", "restart.backoff_s=0", "validation.dataset=synthetic",
                 "validation.freq=3", "validation.steps=1"});
  ASSERT_FALSE(id.empty());
  {
    auto follow = cluster.Follow(id, "before-kill.jsonl");
    ASSERT_TRUE(follow->WaitFor([](const json& e) { return IsStepOfAttempt(e, 1, 3); }, 300000))
        << "attempt 1 never reached step 3";
  }
  // Queued behind it (both slots are taken) and cancelled: a job that never ran.
  const std::string never = cluster.Submit(kTinyJob, {"parallelism.dp=2", "parallelism.ep=2"});
  ASSERT_FALSE(never.empty());
  ASSERT_EQ(cluster.Get(never).value("state", ""), "PENDING");
  ASSERT_EQ(cluster.Cli({"cancel", never}).exit_code, 0);
  // A crash: whatever the writer had not recorded yet must be written once, after.
  cluster.KillController();
  ASSERT_TRUE(cluster.RestartController()) << "see " << cluster.dir();
  ASSERT_TRUE(cluster.WaitConnected({"w1"}, 30000));
  const std::vector<json> followed = cluster.Follow(id, "after-restart.jsonl")->WaitEnd();
  const json job = cluster.Get(id);
  ASSERT_EQ(job.value("state", ""), "SUCCEEDED") << job.dump();
  ASSERT_EQ(job.value("attempt", 0), 2) << "the stall must have restarted the job";

  // The stored events, from seq 1, as the CLI prints them.
  CommandResult stored = cluster.Cli({"watch", id, "--output", "json"});
  ASSERT_EQ(stored.exit_code, 0) << stored.err;
  const fs::path events_file = cluster.dir() / "stored-events.jsonl";
  std::ofstream(events_file) << stored.out;
  const fs::path job_file = cluster.dir() / "job.json";
  std::ofstream(job_file) << job.dump();
  int stalls = 0;
  for (const json& e : JsonLines(stored.out)) stalls += e.contains("stall") ? 1 : 0;
  EXPECT_GE(stalls, 1) << "attempt 1 ended by a Stall";

  // The controller writes a job's last events at its next round; stopping it writes
  // what is queued.
  cluster.SignalController(SIGTERM);
  for (int i = 0; i < 300 && ProcessAlive(cluster.controller_pid()); ++i) usleep(100000);
  ASSERT_FALSE(ProcessAlive(cluster.controller_pid())) << "the controller did not stop on SIGTERM";
  CommandResult checked = Check(events_file, job_file, live, id);
  EXPECT_EQ(checked.exit_code, 0) << checked.out << checked.err;
  std::printf("--tensorboard-dir:\n%s", checked.out.c_str());
  EXPECT_TRUE(fs::exists(live / id / ".trainyard-tensorboard.json"));
  EXPECT_FALSE(fs::exists(live / never)) << "a job that never ran gets no folder";
  // The check can fail: one stored loss changed by the smallest float step is caught.
  {
    std::string altered;
    bool changed = false;
    for (json e : JsonLines(stored.out)) {
      if (!changed && e.contains("step_metrics")) {
        const double loss = e["step_metrics"]["loss"].get<double>();
        e["step_metrics"]["loss"] = std::nextafter(static_cast<float>(loss), 1e9f);
        changed = true;
      }
      altered += e.dump() + "\n";
    }
    const fs::path altered_file = cluster.dir() / "altered-events.jsonl";
    std::ofstream(altered_file) << altered;
    const CommandResult caught = Check(altered_file, job_file, live, id);
    EXPECT_NE(caught.exit_code, 0) << caught.out;
    EXPECT_NE(caught.err.find("train/loss"), std::string::npos) << caught.err;
  }

  ASSERT_TRUE(cluster.RestartController()) << "see " << cluster.dir();
  const fs::path exported = cluster.dir() / "tb-cli";
  CommandResult cli = cluster.Cli({"tensorboard", id, "-o", exported.string()});
  ASSERT_EQ(cli.exit_code, 0) << cli.out << cli.err;
  EXPECT_NE(cli.out.find(id + ": 2 runs, "), std::string::npos) << cli.out;
  checked = Check(events_file, job_file, exported, id);
  EXPECT_EQ(checked.exit_code, 0) << checked.out << checked.err;
  std::printf("trainyard tensorboard:\n%s", checked.out.c_str());
  // The two writers made the same records; only the host in the names may differ.
  for (int attempt : {1, 2}) {
    const fs::path a = live / id / ("attempt-" + std::to_string(attempt));
    const fs::path b = exported / id / ("attempt-" + std::to_string(attempt));
    ASSERT_TRUE(fs::exists(a) && fs::exists(b));
    EXPECT_EQ(ReadFileOrEmpty(fs::directory_iterator(a)->path()), ReadFileOrEmpty(fs::directory_iterator(b)->path()))
        << "attempt " << attempt;
  }

  // Refusals. An existing folder is never written over: same bytes after.
  const std::string before = ReadFileOrEmpty(fs::directory_iterator(exported / id / "attempt-1")->path());
  CommandResult again = cluster.Cli({"tensorboard", id, "-o", exported.string()});
  EXPECT_EQ(again.exit_code, 6) << again.err;
  EXPECT_NE(again.err.find("already exists"), std::string::npos) << again.err;
  EXPECT_EQ(ReadFileOrEmpty(fs::directory_iterator(exported / id / "attempt-1")->path()), before);
  // An unknown job among known ones writes nothing at all.
  const fs::path fresh = cluster.dir() / "tb-fresh";
  CommandResult unknown = cluster.Cli({"tensorboard", id, "job-999", "-o", fresh.string()});
  EXPECT_EQ(unknown.exit_code, 3) << unknown.err;
  EXPECT_NE(unknown.err.find("job-999"), std::string::npos) << unknown.err;
  EXPECT_FALSE(fs::exists(fresh / id));
  const fs::path file = cluster.dir() / "a-file";
  std::ofstream(file) << "x";
  CommandResult not_dir = cluster.Cli({"tensorboard", id, "-o", file.string()});
  EXPECT_EQ(not_dir.exit_code, 2) << not_dir.err;
  EXPECT_NE(not_dir.err.find("-o '" + file.string() + "': not a directory"), std::string::npos) << not_dir.err;
  // The job that never ran writes no folder.
  CommandResult none = cluster.Cli({"tensorboard", never, "-o", fresh.string()});
  EXPECT_EQ(none.exit_code, 0) << none.err;
  EXPECT_NE(none.out.find(never + ": no attempt ran, nothing written"), std::string::npos) << none.out;
  EXPECT_FALSE(fs::exists(fresh / never));
  CommandResult none_json = cluster.Cli({"tensorboard", never, "-o", fresh.string(), "--output", "json"});
  ASSERT_EQ(none_json.exit_code, 0) << none_json.err;
  const std::vector<json> lines = JsonLines(none_json.out);
  ASSERT_EQ(lines.size(), 1u) << none_json.out;
  EXPECT_EQ(lines[0].value("job_id", ""), never);
  EXPECT_TRUE(lines[0].at("runs").empty()) << none_json.out;
  // Nothing of the staging folders is left behind.
  for (const auto& entry : fs::directory_iterator(fresh)) ADD_FAILURE() << "left: " << entry.path();

  // A --tensorboard-dir that cannot be written stops the start, before serving.
  const CommandResult bad = RunCommand({TRAINYARD_CONTROLLER, "--listen", "127.0.0.1:0", "--data-dir",
                                        (cluster.dir() / "data-bad").string(), "--tensorboard-dir",
                                        (file / "sub").string()});
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
  EXPECT_NE(bad.err.find("--tensorboard-dir '" + (file / "sub").string() + "'"), std::string::npos) << bad.err;
  if (HasFailure()) cluster.KeepFiles();
}

}  // namespace
}  // namespace trainyard::testing
