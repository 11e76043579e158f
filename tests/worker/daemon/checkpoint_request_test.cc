// RankSupervisor::RequestCheckpoint ("checkpoint now"): the request file appears in the
// run dir of the named attempt's live ranks only, written whole (no temporary file
// left), and a request for an attempt without live ranks here changes nothing.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "common/base/posix_process_launcher.h"
#include "tests/worker/daemon/test_util.h"
#include "worker/daemon/rank_supervisor.h"

namespace trainyard {
namespace {

namespace fs = std::filesystem;
using testing::EventCollector;
using testing::TempDir;

v1::Assign MakeAssign(const std::string &job, int attempt, std::vector<int> ranks, int world_size) {
  v1::Assign a;
  a.set_job_id(job);
  a.set_attempt(attempt);
  a.set_world_size(world_size);
  for (int r : ranks) a.add_ranks(r);
  a.set_master_addr("127.0.0.1");
  a.set_master_port(29501);
  return a;
}

v1::CheckpointRequest Request(const std::string &job, int attempt) {
  v1::CheckpointRequest r;
  r.set_job_id(job);
  r.set_attempt(attempt);
  return r;
}

class CheckpointRequestTest : public ::testing::Test {
 protected:
  std::unique_ptr<RankSupervisor> Make() {
    RankSupervisor::Options o;
    o.worker_name = "w1";
    o.rank_binary = dir_.WriteScript("sleep.sh", "echo started\nexec sleep 1000\n");
    o.work_dir = dir_.path() + "/work";
    o.slots = 8;
    o.kill_grace = absl::Milliseconds(100);
    return std::make_unique<RankSupervisor>(o, &launcher_, &clock_,
                                            [this](v1::Event e) { events_.Add(std::move(e)); });
  }
  // The request file of (job, attempt) on this worker: work_dir/JOB/ATTEMPT/checkpoint.request.
  std::string RequestFile(const std::string &job, int attempt) const {
    return dir_.path() + "/work/" + job + "/" + std::to_string(attempt) + "/checkpoint.request";
  }
  std::set<std::string> Entries(const std::string &dir) const {
    std::set<std::string> names;
    for (const auto &entry : fs::directory_iterator(dir)) names.insert(entry.path().filename().string());
    return names;
  }

  TempDir dir_;
  RealClock clock_;
  PosixProcessLauncher launcher_;
  EventCollector events_;
};

TEST_F(CheckpointRequestTest, CreatesTheFileOnlyForTheNamedAttemptsLiveRanks) {
  auto sup = Make();
  ASSERT_TRUE(sup->Assign(MakeAssign("job1", 1, {0, 1}, 2)).ok());
  ASSERT_TRUE(sup->Assign(MakeAssign("job1", 2, {0}, 1)).ok());
  ASSERT_TRUE(sup->Assign(MakeAssign("job2", 1, {0}, 1)).ok());
  ASSERT_TRUE(events_.WaitFor([](auto &ev) {
    int started = 0;
    for (auto &e : ev) started += e.has_log() && e.log().message() == "started";
    return started == 4;
  }));

  // Unknown attempt, unknown job: nothing is created, not even a folder.
  sup->RequestCheckpoint(Request("job1", 3));
  sup->RequestCheckpoint(Request("job3", 1));
  EXPECT_FALSE(fs::exists(dir_.path() + "/work/job1/3"));
  EXPECT_FALSE(fs::exists(dir_.path() + "/work/job3"));
  const std::vector<std::pair<std::string, int>> running = {{"job1", 1}, {"job1", 2}, {"job2", 1}};
  for (const auto &[job, attempt] : running) {
    EXPECT_FALSE(fs::exists(RequestFile(job, attempt))) << job << " " << attempt;
  }

  sup->RequestCheckpoint(Request("job1", 1));
  ASSERT_TRUE(fs::exists(RequestFile("job1", 1)));
  std::stringstream text;
  text << std::ifstream(RequestFile("job1", 1)).rdbuf();
  EXPECT_EQ(text.str(), "job=job1 attempt=1\n");
  // One file for the attempt's two ranks (they share the run dir), and no temporary left.
  EXPECT_EQ(Entries(dir_.path() + "/work/job1/1"),
            (std::set<std::string>{"artifacts", "checkpoint.request", "config.json"}));
  EXPECT_FALSE(fs::exists(RequestFile("job1", 2))) << "another attempt of the same job";
  EXPECT_FALSE(fs::exists(RequestFile("job2", 1))) << "another job";

  // An attempt whose ranks are gone (or being killed) gets no request.
  v1::Cancel cancel;
  cancel.set_job_id("job2");
  sup->Cancel(cancel);
  ASSERT_TRUE(events_.WaitFor([](auto &ev) {
    for (auto &e : ev) {
      if (e.job_id() == "job2" && e.has_rank_state() && e.rank_state().state() == v1::RankState::KILLED) return true;
    }
    return false;
  }));
  sup->RequestCheckpoint(Request("job2", 1));
  EXPECT_FALSE(fs::exists(RequestFile("job2", 1)));
}

}  // namespace
}  // namespace trainyard
