// The multi-host tests' fixture: a MultihostCluster, the job they run (the tiny preset,
// dp=2: one rank per worker, checkpoints in the shared folder) and the checks every test
// makes of a finished job: its outcome, gapless event seqs, no step of an attempt
// reported twice, nothing appended after the terminal state, no rank process left.
#pragma once

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/multihost/multihost_cluster.h"

namespace trainyard::testing {

// The controller's heartbeat timeout in the tests (seconds): a link cut longer than this
// loses the worker.
inline constexpr int kHeartbeatTimeoutS = 3;

// Whether this build's controller re-adopts the attempts of a worker that comes back
// within its --reconnect-window (issue 30, "Partitions that cost nothing"): read from
// its --help.
bool ControllerHasReconnectWindow();

// What a finished job's whole event stream says.
struct JobOutcome {
  std::string state;  // of `trainyard get`
  int attempts = 0;   // of `trainyard get`
  std::vector<nlohmann::json> events;
  // attempt → step → times it was reported.
  std::map<int, std::map<int64_t, int>> steps;
  // The steps reported by any attempt.
  std::map<int64_t, int> AllSteps() const;
};

// Checks `events` (a job's whole stream) and adds a test failure for a seq gap, a step
// reported twice by one attempt, or an event after the terminal job_state.
void CheckStream(const std::vector<nlohmann::json>& events, JobOutcome* outcome);

// The latest step `attempt` reported in `events` (0: none).
int64_t LastStep(const std::vector<nlohmann::json>& events, int attempt);
// The worker that ran `rank` of `attempt` (its RUNNING rank_state), "" when none did.
std::string HostOfRank(const std::vector<nlohmann::json>& events, int attempt, int rank);
// The steps of the checkpoints `attempt` completed, in order.
std::vector<int64_t> CheckpointSteps(const std::vector<nlohmann::json>& events, int attempt);
// The step `attempt` resumed from: one before the first step it reported (-1: none).
int64_t ResumedFrom(const JobOutcome& outcome, int attempt);
// Every step 1..steps reported by some attempt, and the last attempt reached `steps`.
void ExpectEveryStep(const JobOutcome& outcome, int64_t steps);

class MultihostTest : public ::testing::Test {
 protected:
  static const std::string kTinyJob;

  void SetUp() override;
  // Makes the hosts, starts the controller (heartbeat timeout kHeartbeatTimeoutS, a
  // --reconnect-window of `reconnect_window_s` where the controller has one) and a worker
  // in each host; waits until all are connected.
  void Start(const std::vector<std::string>& workers, int reconnect_window_s = 2);
  // The job's --set list: tiny, dp=2, `steps`, a checkpoint every `interval` steps in the
  // shared folder, restarts without backoff; `extra` last.
  std::vector<std::string> Job(int steps, int interval, const std::vector<std::string>& extra = {}) const;
  // Submits and follows a job; ASSERTs it was accepted.
  void Submit(const std::vector<std::string>& sets, const std::string& name);
  // Waits for attempt `attempt` to report step >= `step`.
  bool WaitStep(int attempt, int64_t step, int timeout_ms = 120000) const;
  // Waits for an event matching `pred`.
  bool WaitEvent(const std::function<bool(const nlohmann::json&)>& pred, int timeout_ms) const;
  // Waits for the job to end (up to `timeout_ms`), then replays its whole stream, checks
  // it (CheckStream), and checks that no rank process is left in any worker's host.
  JobOutcome Finish(int timeout_ms = 240000);

  std::unique_ptr<MultihostCluster> cluster_;
  std::string id_;
  std::unique_ptr<EventFollower> follow_;
};

}  // namespace trainyard::testing
