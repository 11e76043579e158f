#include "tests/multihost/multihost_fixture.h"

#include <chrono>
#include <set>

#include "tests/support/files.h"
#include "tests/support/test_process.h"

namespace trainyard::testing {

using nlohmann::json;

const std::string MultihostTest::kTinyJob = TRAINYARD_EXAMPLES "/tiny.toml";

namespace {
bool IsTerminal(const std::string& state) {
  return state == "SUCCEEDED" || state == "FAILED" || state == "CANCELLED";
}
bool IsTerminalEvent(const json& e) {
  return e.contains("job_state") && IsTerminal(e.at("job_state").value("state", ""));
}
}  // namespace

std::map<int64_t, int> JobOutcome::AllSteps() const {
  std::map<int64_t, int> out;
  for (const auto& [attempt, steps] : this->steps) {
    for (const auto& [step, n] : steps) out[step] += n;
  }
  return out;
}

void CheckStream(const std::vector<json>& events, JobOutcome* outcome) {
  int64_t last_seq = 0;
  bool ended = false;
  for (const json& e : events) {
    const int64_t seq = JsonInt(e.at("seq"));
    EXPECT_EQ(seq, last_seq + 1) << "seq gap or repeat before " << e.dump();
    last_seq = seq;
    EXPECT_FALSE(ended) << "appended after the terminal state: " << e.dump();
    if (IsTerminalEvent(e)) ended = true;
    if (e.contains("step_metrics")) {
      const int attempt = e.value("attempt", 0);
      const int64_t step = JsonInt(e.at("step_metrics").at("step"));
      const int n = ++outcome->steps[attempt][step];
      EXPECT_EQ(n, 1) << "attempt " << attempt << " reported step " << step << " twice";
    }
  }
  EXPECT_TRUE(ended) << "the stream has no terminal job_state";
  outcome->events = events;
}

int64_t LastStep(const std::vector<json>& events, int attempt) {
  int64_t last = 0;
  for (const json& e : events) {
    if (e.contains("step_metrics") && e.value("attempt", 0) == attempt) {
      last = std::max(last, JsonInt(e.at("step_metrics").at("step")));
    }
  }
  return last;
}

std::string HostOfRank(const std::vector<json>& events, int attempt, int rank) {
  for (const json& e : events) {
    if (e.value("attempt", 0) != attempt || e.value("rank", -1) != rank || !e.contains("rank_state")) continue;
    if (e.at("rank_state").value("state", "") == "RUNNING") return e.at("rank_state").value("worker", "");
  }
  return "";
}

std::vector<int64_t> CheckpointSteps(const std::vector<json>& events, int attempt) {
  std::vector<int64_t> out;
  for (const json& e : events) {
    if (e.contains("checkpoint") && e.value("attempt", 0) == attempt) out.push_back(JsonInt(e.at("checkpoint").at("step")));
  }
  return out;
}

int64_t ResumedFrom(const JobOutcome& outcome, int attempt) {
  auto it = outcome.steps.find(attempt);
  return it == outcome.steps.end() || it->second.empty() ? -1 : it->second.begin()->first - 1;
}

void ExpectEveryStep(const JobOutcome& outcome, int64_t steps) {
  const std::map<int64_t, int> all = outcome.AllSteps();
  for (int64_t s = 1; s <= steps; ++s) EXPECT_EQ(all.count(s), 1u) << "no attempt reported step " << s;
  ASSERT_FALSE(outcome.steps.empty());
  EXPECT_EQ(outcome.steps.rbegin()->second.rbegin()->first, steps) << "the last attempt did not reach the end";
}

void MultihostTest::SetUp() {
  if (const std::string why = NetnsFabric::Unsupported(); !why.empty()) GTEST_SKIP() << why;
}

bool ControllerHasReconnectWindow() {
  static const bool has = RunCommand({TRAINYARD_CONTROLLER, "--help"}).out.find("--reconnect-window") != std::string::npos;
  return has;
}

void MultihostTest::Start(const std::vector<std::string>& workers, int reconnect_window_s) {
  const std::string tag = ::testing::UnitTest::GetInstance()->current_test_info()->name();
  cluster_ = std::make_unique<MultihostCluster>(tag, workers);
  ASSERT_TRUE(cluster_->ok());
  std::vector<std::string> args = {"--heartbeat-timeout", std::to_string(kHeartbeatTimeoutS)};
  if (ControllerHasReconnectWindow()) args.insert(args.end(), {"--reconnect-window", std::to_string(reconnect_window_s)});
  ASSERT_TRUE(cluster_->StartController(args)) << "the controller did not start; see " << cluster_->dir();
  for (const std::string& w : workers) cluster_->StartWorker(w);
  ASSERT_TRUE(cluster_->WaitConnected(workers, 30000)) << "workers never registered; see " << cluster_->dir();
}

std::vector<std::string> MultihostTest::Job(int steps, int interval, const std::vector<std::string>& extra) const {
  std::vector<std::string> sets = {"parallelism.dp=2",
                                   "parallelism.collective_timeout_s=30",
                                   "training.steps=" + std::to_string(steps),
                                   "checkpoint.interval=" + std::to_string(interval),
                                   "checkpoint.keep=2",
                                   "checkpoint.dir=" + (cluster_->shared_dir() / "checkpoints").string(),
                                   "restart.max_restarts=3",
                                   "restart.backoff_s=0"};
  sets.insert(sets.end(), extra.begin(), extra.end());
  return sets;
}

void MultihostTest::Submit(const std::vector<std::string>& sets, const std::string& name) {
  id_ = cluster_->Submit(kTinyJob, sets);
  ASSERT_FALSE(id_.empty());
  follow_ = cluster_->Follow(id_, name + ".jsonl");
}

bool MultihostTest::WaitStep(int attempt, int64_t step, int timeout_ms) const {
  return WaitEvent(
      [&](const json& e) {
        return e.value("attempt", 0) == attempt && e.contains("step_metrics") &&
               JsonInt(e.at("step_metrics").at("step")) >= step;
      },
      timeout_ms);
}

bool MultihostTest::WaitEvent(const std::function<bool(const json&)>& pred, int timeout_ms) const {
  return follow_->WaitFor(pred, timeout_ms).has_value();
}

JobOutcome MultihostTest::Finish(int timeout_ms) {
  JobOutcome out;
  const auto start = std::chrono::steady_clock::now();
  auto seconds = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  EXPECT_TRUE(WaitEvent(IsTerminalEvent, timeout_ms)) << "job " << id_ << " never ended; see " << cluster_->dir();
  const double ended_s = seconds();
  const json job = cluster_->Get(id_);
  out.state = job.value("state", "");
  out.attempts = job.value("attempt", 0);
  // No rank process is left in any worker's host, nor any rank the job's events named.
  std::map<std::string, std::vector<pid_t>> left;
  const bool none = WaitUntil(
      [&] {
        left = cluster_->RankProcesses();
        return left.empty();
      },
      std::chrono::seconds(60), std::chrono::milliseconds(200));
  for (const auto& [host, pids] : left) {
    for (pid_t pid : pids) ADD_FAILURE() << "trainyard-rank pid " << pid << " still runs in host " << host;
  }
  EXPECT_TRUE(none);
  // Every worker is connected again, so whatever a cut-off one held has been delivered
  // (or refused) before the stream is read back and checked.
  EXPECT_TRUE(cluster_->WaitConnected(cluster_->workers(), 60000)) << "a worker never came back";
  CheckStream(cluster_->AllEvents(id_), &out);
  for (int attempt = 1; attempt <= out.attempts; ++attempt) {
    for (const auto& [rank, pid] : RankPids(out.events, attempt)) {
      EXPECT_FALSE(ProcessAlive(pid)) << "rank " << rank << " of attempt " << attempt << " (pid " << pid << ")";
    }
  }
  std::printf("[multihost] job %s: %s after %d attempt(s), %zu events; ended %.1f s into Finish, ranks gone %.1f s\n",
              id_.c_str(), out.state.c_str(), out.attempts, out.events.size(), ended_s, seconds());
  return out;
}

}  // namespace trainyard::testing
