// Jobs across hosts: the controller and each worker in its own network namespace
// (tests/multihost/netns_fabric.h), the production TLS and token set-up, checkpoints in a
// shared folder. Links are cut, flapped and slowed under a running job.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "tests/multihost/multihost_fixture.h"

namespace trainyard::testing {
namespace {

using nlohmann::json;

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
  std::set<std::string> hosts;
  for (const json& e : out.events) {
    if (e.contains("rank_state") && e.at("rank_state").value("state", "") == "RUNNING") {
      hosts.insert(e.at("rank_state").value("worker", ""));
    }
  }
  EXPECT_EQ(hosts, (std::set<std::string>{"w1", "w2"})) << "the ranks did not span both hosts";
}

}  // namespace
}  // namespace trainyard::testing
