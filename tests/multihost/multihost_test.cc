// Jobs across hosts: the controller and each worker in its own network namespace
// (tests/multihost/netns_fabric.h), the production TLS and token set-up, checkpoints in a
// shared folder. A worker's link is cut, flapped and slowed under a running job.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "tests/multihost/multihost_fixture.h"

namespace trainyard::testing {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

bool IsRestarting(const json& e) {
  return e.value("attempt", 0) == 1 && e.contains("job_state") &&
         e.at("job_state").value("state", "") == "RESTARTING";
}

// dp=2 with one slot per worker: rank 0 on one host, rank 1 on the other, their Gloo
// traffic over the bridge, rendezvous at rank 0's worker's address.
TEST_F(MultihostTest, AJobSpansTwoHosts) {
  Start({"w1", "w2"});
  ASSERT_NO_FATAL_FAILURE(Submit(Job(20, 10), "span"));
  const JobOutcome out = Finish();
  EXPECT_EQ(out.state, "SUCCEEDED");
  EXPECT_EQ(out.attempts, 1);
  ASSERT_EQ(out.steps.count(1), 1u);
  EXPECT_EQ(out.steps.at(1).size(), 20u);
  const std::set<std::string> hosts = {HostOfRank(out.events, 1, 0), HostOfRank(out.events, 1, 1)};
  EXPECT_EQ(hosts, (std::set<std::string>{"w1", "w2"})) << "the ranks did not span both hosts";
}

// Rank 1's host is cut off for longer than the heartbeat timeout: the controller loses
// that worker and restarts the job from its newest checkpoint on the two hosts left (a
// spare, w3, takes the lost one's place) while the link is still down. Once it is back,
// the cut-off worker's orphaned rank ends and the job finishes.
TEST_F(MultihostTest, AWorkerCutOffRestartsTheJobFromItsCheckpointElsewhere) {
  Start({"w1", "w2", "w3"});
  constexpr int kSteps = 300;
  ASSERT_NO_FATAL_FAILURE(Submit(Job(kSteps, 20), "worker-cut"));
  ASSERT_TRUE(WaitEvent([](const json& e) { return e.contains("checkpoint"); }, 120000)) << "no checkpoint";
  ASSERT_TRUE(WaitStep(1, 25));
  const std::string cut = HostOfRank(follow_->Events(), 1, 1);
  ASSERT_FALSE(cut.empty());
  ASSERT_TRUE(cluster_->fabric().SetLink(cut, false)) << cluster_->fabric().error();
  ASSERT_TRUE(WaitEvent(IsRestarting, 60000)) << "the controller never gave up on " << cut;
  ASSERT_TRUE(WaitStep(2, 1)) << "attempt 2 never trained while " << cut << " was cut off";
  ASSERT_TRUE(cluster_->fabric().SetLink(cut, true)) << cluster_->fabric().error();

  const JobOutcome out = Finish();
  EXPECT_EQ(out.state, "SUCCEEDED");
  EXPECT_EQ(out.attempts, 2);
  ExpectEveryStep(out, kSteps);
  EXPECT_NE(HostOfRank(out.events, 2, 0), cut);
  EXPECT_NE(HostOfRank(out.events, 2, 1), cut);
  // Attempt 2 resumed from the newest checkpoint attempt 1 completed.
  const std::vector<int64_t> saved = CheckpointSteps(out.events, 1);
  ASSERT_FALSE(saved.empty());
  EXPECT_EQ(ResumedFrom(out, 2), saved.back());
}

// The same cut with elastic shrink configured and no spare: attempt 2 runs at dp=1 on
// the host left.
TEST_F(MultihostTest, AWorkerCutOffShrinksAnElasticJobToTheHostLeft) {
  Start({"w1", "w2"});
  constexpr int kSteps = 300;
  ASSERT_NO_FATAL_FAILURE(Submit(Job(kSteps, 20, {"restart.min_dp=1", "restart.elastic_wait_s=1"}), "elastic"));
  ASSERT_TRUE(WaitEvent([](const json& e) { return e.contains("checkpoint"); }, 120000)) << "no checkpoint";
  ASSERT_TRUE(WaitStep(1, 25));
  const std::string cut = HostOfRank(follow_->Events(), 1, 1);
  ASSERT_FALSE(cut.empty());
  ASSERT_TRUE(cluster_->fabric().SetLink(cut, false)) << cluster_->fabric().error();
  ASSERT_TRUE(WaitStep(2, 1, 60000)) << "attempt 2 never trained while " << cut << " was cut off";
  ASSERT_TRUE(cluster_->fabric().SetLink(cut, true)) << cluster_->fabric().error();

  const JobOutcome out = Finish();
  EXPECT_EQ(out.state, "SUCCEEDED");
  EXPECT_EQ(out.attempts, 2);
  EXPECT_EQ(cluster_->Get(id_).value("world_size", 0), 1);
  ExpectEveryStep(out, kSteps);
  EXPECT_NE(HostOfRank(out.events, 2, 0), cut);
  const std::vector<int64_t> saved = CheckpointSteps(out.events, 1);
  ASSERT_FALSE(saved.empty());
  EXPECT_EQ(ResumedFrom(out, 2), saved.back());
}

// w2's link goes down for a second and up for a second, for 20 s (or until the job
// ends): TCP rides it out, and the job finishes (restarts allowed, none required).
TEST_F(MultihostTest, AJobFinishesOverAFlappingLink) {
  Start({"w1", "w2"});
  constexpr int kSteps = 1000;
  ASSERT_NO_FATAL_FAILURE(Submit(Job(kSteps, 250), "flapping"));
  ASSERT_TRUE(WaitStep(1, 10));
  const auto until = Clock::now() + std::chrono::seconds(20);
  int flaps = 0;
  auto ended = [&] { return cluster_->Get(id_).value("state", "") == "SUCCEEDED"; };
  while (Clock::now() < until && !ended()) {
    ASSERT_TRUE(cluster_->fabric().SetLink("w2", false)) << cluster_->fabric().error();
    std::this_thread::sleep_for(std::chrono::seconds(1));
    ASSERT_TRUE(cluster_->fabric().SetLink("w2", true)) << cluster_->fabric().error();
    std::this_thread::sleep_for(std::chrono::seconds(1));
    ++flaps;
  }
  std::printf("[multihost] %d flaps of w2's link\n", flaps);
  EXPECT_GE(flaps, 2) << "the job ended before the link flapped: make it longer";
  const JobOutcome out = Finish();
  EXPECT_EQ(out.state, "SUCCEEDED");
  ExpectEveryStep(out, kSteps);
}

// w2's link shaped to 1 Mbit/s each way (tc tbf) from the start: every all-reduce crawls
// across it, and the job finishes.
TEST_F(MultihostTest, AJobFinishesOverASlowLink) {
  Start({"w1", "w2"});
  ASSERT_TRUE(cluster_->fabric().SetRate("w2", "1mbit")) << cluster_->fabric().error();
  constexpr int kSteps = 3;
  ASSERT_NO_FATAL_FAILURE(Submit(Job(kSteps, 2, {"parallelism.collective_timeout_s=120"}), "slow"));
  const JobOutcome out = Finish();
  EXPECT_EQ(out.state, "SUCCEEDED");
  EXPECT_EQ(out.attempts, 1);
  ExpectEveryStep(out, kSteps);
}

}  // namespace
}  // namespace trainyard::testing
