// Sweeps through JobManager and a real SqliteJobStore: a sweep and its children are
// stored in one transaction or not at all, every refusal stores nothing, max_concurrent
// holds across a controller restart, GetSweep ranks the children by their stored
// validation losses, and CancelSweep ends every child in one write.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "tests/server/state/manager_fixture.h"

namespace trainyard::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using Msg = v1::ControllerMessage;

class JobSweepsTest : public ManagerFixture {
 protected:
  static v1::SubmitSweepRequest Request(std::vector<std::pair<std::string, std::vector<std::string>>> axes,
                                        int max_concurrent = 0) {
    v1::SubmitSweepRequest request;
    *request.mutable_spec() = Spec(1);
    request.mutable_spec()->mutable_job()->set_name("grid");
    for (auto& [key, values] : axes) {
      v1::SweepAxis* axis = request.add_axes();
      axis->set_key(key);
      for (auto& v : values) axis->add_values(v);
    }
    request.set_max_concurrent(max_concurrent);
    return request;
  }
  // The usual 2 x 2 grid: lr slowest, seed fastest.
  static v1::SubmitSweepRequest Grid(int max_concurrent = 0) {
    return Request({{"training.lr", {"1e-4", "3e-4"}}, {"training.seed", {"1", "2"}}}, max_concurrent);
  }
  size_t StoredJobs() {
    auto jobs = db_->LoadJobs();
    EXPECT_TRUE(jobs.ok()) << jobs.status();
    return jobs.ok() ? jobs->size() : 0;
  }
  size_t StoredSweeps() {
    auto sweeps = db_->LoadSweeps();
    EXPECT_TRUE(sweeps.ok()) << sweeps.status();
    return sweeps.ok() ? sweeps->size() : 0;
  }
  std::vector<std::string> Running(const v1::SweepView& view) {
    std::vector<std::string> out;
    for (const std::string& id : view.sweep().job_ids()) {
      const v1::Job::State s = Job(id).state();
      if (s == v1::Job::SCHEDULED || s == v1::Job::RUNNING) out.push_back(id);
    }
    return out;
  }
  v1::Event Val(const std::string& job, int64_t step, double loss) {
    v1::Event e;
    e.set_job_id(job);
    e.set_attempt(1);
    e.set_rank(0);
    e.set_source_seq(++source_seq_[{job, 1, 0}]);
    e.mutable_validation()->set_step(step);
    e.mutable_validation()->set_loss(loss);
    e.mutable_validation()->set_tokens(1024);
    e.mutable_validation()->set_ms(1);
    return e;
  }
  // The refusal of `request`, after which nothing new is stored.
  absl::Status Refused(const v1::SubmitSweepRequest& request) {
    const size_t jobs = StoredJobs(), sweeps = StoredSweeps();
    auto view = manager_->SubmitSweep(request, "alice");
    EXPECT_FALSE(view.ok());
    EXPECT_EQ(StoredJobs(), jobs);
    EXPECT_EQ(StoredSweeps(), sweeps);
    return view.status();
  }
};

TEST_F(JobSweepsTest, ASweepIsStoredWithAllItsChildrenNamedLabelledAndInOrder) {
  Connect("w1", 8);
  auto view = manager_->SubmitSweep(Grid(), "alice");
  ASSERT_TRUE(view.ok()) << view.status();
  EXPECT_EQ(view->sweep().id(), "sweep-1");
  EXPECT_EQ(view->sweep().name(), "grid");
  EXPECT_EQ(view->sweep().owner(), "alice");
  ASSERT_EQ(view->children_size(), 4);
  EXPECT_EQ(StoredJobs(), 4u);
  EXPECT_EQ(StoredSweeps(), 1u);
  std::vector<std::string> labels, names;
  for (const auto& c : view->children()) {
    labels.push_back(c.label());
    const v1::Job job = Job(c.job_id());
    names.push_back(job.spec().job().name());
    EXPECT_EQ(job.sweep_id(), "sweep-1");
    EXPECT_EQ(job.sweep_index(), c.index());
  }
  EXPECT_THAT(labels, ElementsAre("lr=0.0001,seed=1", "lr=0.0001,seed=2", "lr=0.0003,seed=1", "lr=0.0003,seed=2"));
  EXPECT_THAT(names, ElementsAre("grid-0", "grid-1", "grid-2", "grid-3"));
  EXPECT_DOUBLE_EQ(Job(view->sweep().job_ids(2)).spec().training().lr(), 3e-4);
  EXPECT_EQ(Job(view->sweep().job_ids(3)).spec().training().seed(), 2u);
  // The axes as typed by the controller.
  EXPECT_THAT(view->sweep().axes(0).values(), ElementsAre("0.0001", "0.0003"));
  // The store's journal: one create for the sweep and all its jobs.
  EXPECT_GE(IndexOf("create sweep-1 with 4 jobs"), 0);
}

TEST_F(JobSweepsTest, RefusalsNameTheProblemAndStoreNothing) {
  Connect("w1", 8);
  std::vector<std::string> thousand;
  for (int i = 1; i <= 1000; ++i) thousand.push_back(std::to_string(i));
  absl::Status huge = Refused(Request({{"training.seed", thousand}, {"training.log_freq", thousand}}));
  EXPECT_EQ(huge.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(huge.message(), HasSubstr("sweep of 1000000 points"));
  EXPECT_THAT(huge.message(), HasSubstr("over the limit of 1000 points"));

  absl::Status bad_point = Refused(Request({{"training.lr", {"1e-4", "-1"}}}));
  EXPECT_THAT(bad_point.message(), HasSubstr("sweep point 1 of 2 (lr=-1)"));
  EXPECT_THAT(bad_point.message(), HasSubstr("training.lr"));

  EXPECT_THAT(Refused(Request({{"training.lr", {"1e-4"}}, {"training.lr", {"3e-4"}}})).message(),
              HasSubstr("training.lr is swept twice"));
  EXPECT_THAT(Refused(Request({{"training.lr\xc3\xa9", {"1e-4"}}})).message(), HasSubstr("unknown key"));
  EXPECT_THAT(Refused(Request({{"training.lr", {"\xff\xfe"}}})).message(), HasSubstr("training.lr"));
  EXPECT_THAT(Refused(Request({{"training.lr", {"1e-4", ""}}})).message(), HasSubstr("is empty"));
  EXPECT_THAT(Refused(Request({{"training.lr", {"1e-4", "0.0001"}}})).message(), HasSubstr("repeats value 1"));
  EXPECT_THAT(Refused(Request({{"training.lr", {"nan"}}})).message(), HasSubstr("training.lr"));
  EXPECT_THAT(Refused(Request({{"job.name", {"a", "b"}}})).message(), HasSubstr("job.name cannot be swept"));
  EXPECT_THAT(Refused(Request({{"lr", {"1e-4"}}})).message(), HasSubstr("must be section.key"));
  EXPECT_THAT(Refused(Request({})).message(), HasSubstr("at least one swept key"));
  EXPECT_THAT(Refused(Request({{"training.lr", {"1e-4"}}}, -1)).message(), HasSubstr("max_concurrent"));
  EXPECT_THAT(Refused(Request({{"training.lr", {}}})).message(), HasSubstr("no values"));
  // A store that fails the transaction leaves no sweep and no child.
  store_->FailNext(TestJobStore::Kind::kCreate, absl::UnavailableError("disk full"));
  EXPECT_EQ(Refused(Grid()).code(), absl::StatusCode::kUnavailable);
  // And the next one is stored whole.
  EXPECT_TRUE(manager_->SubmitSweep(Grid(), "alice").ok());
  EXPECT_EQ(StoredJobs(), 4u);
}

TEST_F(JobSweepsTest, MaxConcurrentHoldsAcrossARestartAndTheRankingFollowsTheStoredLosses) {
  Connect("w1", 8);
  auto submitted = manager_->SubmitSweep(
      Request({{"training.lr", {"1e-4", "3e-4", "1e-3"}}, {"training.seed", {"1", "2"}}}, 2), "alice");
  ASSERT_TRUE(submitted.ok()) << submitted.status();
  const std::vector<std::string> ids(submitted->sweep().job_ids().begin(), submitted->sweep().job_ids().end());
  ASSERT_EQ(ids.size(), 6u);
  EXPECT_THAT(Running(*submitted), ElementsAre(ids[0], ids[1]));
  EXPECT_THAT(Job(ids[2]).pending_reason(), HasSubstr("sweep sweep-1: 2 of its children running or starting"));

  // A controller restart, and the worker back without its ranks: the two placed
  // children fail (no restarts), and the reloaded sweep still lets in only two more.
  Restart();
  Conn w1 = Connect("w1", 8);
  auto view = manager_->GetSweep("sweep-1");
  ASSERT_TRUE(view.ok()) << view.status();
  EXPECT_EQ(Job(ids[0]).state(), v1::Job::FAILED);
  EXPECT_THAT(Running(*view), ElementsAre(ids[2], ids[3])) << "two of the four left, after the restart";
  for (int i : {2, 3}) Report(w1, ids[i], 1, {0}, v1::RankState::RUNNING);
  Send(w1, {Val(ids[2], 10, 2.75), Val(ids[3], 10, 2.25), Val(ids[2], 20, 1.5)});
  // A child ends: exactly one more starts, the lowest index.
  Report(w1, ids[3], 1, {0}, v1::RankState::EXITED);
  view = manager_->GetSweep("sweep-1");
  ASSERT_TRUE(view.ok());
  EXPECT_THAT(Running(*view), ElementsAre(ids[2], ids[4]));
  // A NaN loss is shown but ranks nowhere.
  Report(w1, ids[4], 1, {0}, v1::RankState::RUNNING);
  Send(w1, {Val(ids[4], 5, std::nan(""))});
  view = manager_->GetSweep("sweep-1");
  ASSERT_TRUE(view.ok());
  EXPECT_TRUE(std::isnan(view->children(4).last_validation().loss()));

  // The newest validation of each: ids[2] 1.5 (step 20), ids[3] 2.25; the rest none.
  std::vector<std::pair<std::string, int>> ranks;
  for (const auto& c : view->children()) ranks.emplace_back(c.job_id(), c.rank());
  EXPECT_THAT(ranks, ElementsAre(std::pair(ids[0], 0), std::pair(ids[1], 0), std::pair(ids[2], 1), std::pair(ids[3], 2),
                                 std::pair(ids[4], 0), std::pair(ids[5], 0)));
  EXPECT_EQ(view->children(2).last_validation().step(), 20);
  EXPECT_EQ(view->children(2).last_validation().loss(), 1.5);
  EXPECT_FALSE(view->children(0).has_last_validation());
  EXPECT_EQ(view->states().at("SUCCEEDED"), 1);
  EXPECT_EQ(view->states().at("FAILED"), 2);
  EXPECT_FALSE(view->ended());
}

TEST_F(JobSweepsTest, CancelSweepEndsEveryChildInOneWriteAndStartsNoneOnTheWay) {
  Conn w1 = Connect("w1", 8);
  auto submitted = manager_->SubmitSweep(Grid(1), "alice");
  ASSERT_TRUE(submitted.ok());
  const std::string first = submitted->sweep().job_ids(0);
  Report(w1, first, 1, {0}, v1::RankState::RUNNING);
  const size_t assigns_before = w1.channel->Of(Msg::kAssign).size();
  auto view = manager_->CancelSweep("sweep-1", "wrong grid");
  ASSERT_TRUE(view.ok()) << view.status();
  for (const auto& c : view->children()) {
    EXPECT_EQ(c.state(), v1::Job::CANCELLED) << c.job_id();
    EXPECT_THAT(c.reason(), HasSubstr("cancelled with its sweep sweep-1: wrong grid"));
  }
  EXPECT_TRUE(view->ended());
  // The pass after the cancels found nothing to start: the running child was stopped,
  // and no pending one got an Assign on the way.
  EXPECT_EQ(w1.channel->Of(Msg::kAssign).size(), assigns_before);
  EXPECT_EQ(manager_->CancelSweep("sweep-9", "").status().code(), absl::StatusCode::kNotFound);
  // Cancelling an ended sweep changes nothing and is not an error.
  EXPECT_TRUE(manager_->CancelSweep("sweep-1", "again").ok());
}

TEST_F(JobSweepsTest, ListsShowTheSweepAsOneRowAndCanLeaveItsChildrenOut) {
  Connect("w1", 8);
  Submit(Spec(1));
  ASSERT_TRUE(manager_->SubmitSweep(Request({{"training.lr", {"1e-4", "3e-4"}}}), "alice").ok());
  ASSERT_TRUE(manager_->SubmitSweep(Request({{"training.lr", {"1e-4", "3e-4"}}}), "bob").ok());
  EXPECT_EQ(manager_->List({}, 100).size(), 5u);
  EXPECT_EQ(manager_->List({}, 100, "", /*without_sweep_children=*/true).size(), 1u);
  std::vector<v1::SweepView> sweeps = manager_->ListSweeps(0);
  ASSERT_EQ(sweeps.size(), 2u);
  EXPECT_EQ(sweeps[0].sweep().id(), "sweep-2") << "newest first";
  EXPECT_EQ(sweeps[0].children_size(), 0);
  EXPECT_EQ(sweeps[0].states().at("SCHEDULED"), 2);
  ASSERT_EQ(manager_->ListSweeps(0, "alice").size(), 1u);
  EXPECT_EQ(manager_->ListSweeps(0, "alice")[0].sweep().id(), "sweep-1");
}

}  // namespace
}  // namespace trainyard::testing
