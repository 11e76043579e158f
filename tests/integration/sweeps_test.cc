// Sweeps end to end: the real controller, worker, CLI and Gloo ranks on loopback. A
// 6-point sweep with --max-concurrent 2 on a worker with room for four never has more
// than two children running (checked from the children's stored state events), every
// child succeeds, and `get SWEEP` ranks the children by exactly the validation losses
// their own event logs hold; a second sweep is cancelled as one while two children run,
// and the four that waited never start.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "tests/support/test_cluster.h"

namespace trainyard::testing {
namespace {

using nlohmann::json;

const std::string kTinyJob = TRAINYARD_EXAMPLES "/tiny.toml";

class SweepsTest : public ::testing::Test {
 protected:
  void TearDown() override {
    if (HasFailure() && cluster_) cluster_->KeepFiles();
  }
  void Start() {
    cluster_ = std::make_unique<TestCluster>(kBuiltBinaries, "sweeps");
    ASSERT_TRUE(cluster_->StartController()) << "see " << cluster_->dir();
    WorkerOptions w;
    w.name = "w1";
    w.slots = 4;
    w.extra_args = {"--threads-per-rank", "1"};
    cluster_->StartWorker(w);
    ASSERT_TRUE(cluster_->WaitConnected({"w1"}, 60000)) << "see " << cluster_->dir();
  }
  // `submit` of a 3 x 2 sweep (lr slowest, seed fastest) with these --set edits; the
  // sweep's view, or null when refused.
  json SubmitSweep(const std::vector<std::string>& sets, int max_concurrent) const {
    std::vector<std::string> args = {"submit",           kTinyJob,
                                     "--output",         "json",
                                     "--sweep",          "training.lr=1e-3,3e-3,1e-2",
                                     "--sweep",          "training.seed=1,2",
                                     "--max-concurrent", std::to_string(max_concurrent)};
    for (const auto& s : sets) args.insert(args.end(), {"--set", s});
    const CommandResult r = cluster_->Cli(args);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    const std::vector<json> lines = JsonLines(r.out);
    return r.exit_code == 0 && !lines.empty() ? lines[0] : json();
  }
  json GetSweep(const std::string& id) const {
    const CommandResult r = cluster_->Cli({"get", id, "--output", "json"});
    const std::vector<json> lines = JsonLines(r.out);
    return r.exit_code == 0 && !lines.empty() ? lines[0] : json();
  }
  static std::vector<std::string> ChildIds(const json& view) {
    std::vector<std::string> out;
    for (const json& id : view["sweep"]["job_ids"]) out.push_back(id.get<std::string>());
    return out;
  }
  // Every stored event of job `id`, in seq order.
  std::vector<json> Events(const std::string& id) const {
    return JsonLines(cluster_->Cli({"watch", id, "--output", "json", "--from-seq", "1"}).out);
  }
  // The most children running at once, from their stored job_state events: a child
  // holds a place from its SCHEDULED event to its next non-running state.
  int MostAtOnce(const std::vector<std::string>& ids) const {
    std::vector<std::pair<double, int>> edges;  // (time, +1 start / -1 end); ends first on ties
    for (const std::string& id : ids) {
      bool on = false;
      for (const json& e : Events(id)) {
        if (!e.contains("job_state")) continue;
        const std::string s = e["job_state"].value("state", "");
        const double t = RfcSeconds(e.value("time", ""));
        const bool active = s == "SCHEDULED" || s == "RUNNING" || s == "RESTARTING";
        if (active && !on) edges.emplace_back(t, +1);
        if (!active && on) edges.emplace_back(t, -1);
        on = active;
      }
    }
    std::sort(edges.begin(), edges.end());
    int now = 0, most = 0;
    for (const auto& [t, d] : edges) most = std::max(most, now += d);
    return most;
  }

  std::unique_ptr<TestCluster> cluster_;
};

TEST_F(SweepsTest, SixPointsTwoAtATimeAllSucceedRankedByTheirValidationLosses) {
  ASSERT_NO_FATAL_FAILURE(Start());
  const json submitted = SubmitSweep({"job.name=grid", "training.steps=6", "training.log_freq=1",
                                      "validation.dataset=synthetic", "validation.freq=3", "validation.steps=2"},
                                     2);
  ASSERT_TRUE(submitted.is_object());
  const std::string sweep = submitted["sweep"].value("id", "");
  const std::vector<std::string> ids = ChildIds(submitted);
  ASSERT_EQ(ids.size(), 6u) << submitted.dump();
  ASSERT_TRUE(Eventually([&] { return GetSweep(sweep).value("ended", false); }, 400000)) << GetSweep(sweep).dump();
  const json view = GetSweep(sweep);
  EXPECT_EQ(view["states"].value("SUCCEEDED", 0), 6) << view.dump();
  EXPECT_EQ(MostAtOnce(ids), 2) << "max_concurrent 2, on a worker with four slots";

  // Each child's newest validation loss from its own log, and the ranking from those.
  std::map<std::string, double> loss;
  for (const std::string& id : ids) {
    for (const json& e : Events(id)) {
      if (e.contains("validation")) loss[id] = e["validation"].value("loss", 0.0);
    }
  }
  ASSERT_EQ(loss.size(), 6u);
  std::vector<std::string> expected = ids;
  std::stable_sort(expected.begin(), expected.end(),
                   [&](const std::string& a, const std::string& b) { return loss[a] < loss[b]; });
  std::vector<std::string> ranked(6);
  for (const json& c : view["children"]) {
    const int rank = c.value("rank", 0);
    ASSERT_GE(rank, 1) << c.dump();
    ASSERT_LE(rank, 6);
    ranked[rank - 1] = c.value("job_id", "");
    EXPECT_DOUBLE_EQ(c["last_validation"].value("loss", -1.0), loss[c.value("job_id", "")]) << c.dump();
  }
  EXPECT_EQ(ranked, expected);
  // The learning rates differ, so the losses do too: the ranking is not an accident of ties.
  EXPECT_NE(loss[ids[0]], loss[ids[4]]);
}

TEST_F(SweepsTest, ASweepIsCancelledAsOneAndItsWaitingChildrenNeverStart) {
  ASSERT_NO_FATAL_FAILURE(Start());
  const json submitted = SubmitSweep({"job.name=long", "training.steps=100000"}, 2);
  ASSERT_TRUE(submitted.is_object());
  const std::string sweep = submitted["sweep"].value("id", "");
  const std::vector<std::string> ids = ChildIds(submitted);
  ASSERT_EQ(ids.size(), 6u);
  ASSERT_TRUE(Eventually([&] { return GetSweep(sweep)["states"].value("RUNNING", 0) == 2; }, 120000))
      << GetSweep(sweep).dump();
  const CommandResult cancel = cluster_->Cli({"cancel", sweep, "--reason", "wrong grid"});
  ASSERT_EQ(cancel.exit_code, 0) << cancel.err;
  ASSERT_TRUE(Eventually([&] { return GetSweep(sweep).value("ended", false); }, 60000)) << GetSweep(sweep).dump();
  const json view = GetSweep(sweep);
  EXPECT_EQ(view["states"].value("CANCELLED", 0), 6) << view.dump();
  for (const json& c : view["children"]) {
    EXPECT_NE(c.value("reason", "").find("cancelled with its sweep " + sweep + ": wrong grid"), std::string::npos)
        << c.dump();
  }
  int started = 0;
  for (const std::string& id : ids) {
    bool scheduled = false;
    for (const json& e : Events(id))
      scheduled = scheduled || (e.contains("job_state") && e["job_state"].value("state", "") == "SCHEDULED");
    started += scheduled ? 1 : 0;
  }
  EXPECT_EQ(started, 2) << "only the two that ran were ever placed";
}

}  // namespace
}  // namespace trainyard::testing
