// SweepGate (a sweep's max_concurrent) inside the scheduling cycle, without a store:
// how many children a pass places, which ones, in whose words the rest wait, and that
// a child's end lets exactly one more in; read from the recorded Effects.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/server/state/cycle_fixture.h"

namespace trainyard::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

class SweepGateTest : public CycleFixture {
 protected:
  // Sweep `sweep_id` with children job-<first>... (one slot each), indices as given.
  void AddSweep(const std::string& sweep_id, int max_concurrent, int first, const std::vector<int>& indices) {
    v1::Sweep sweep;
    sweep.set_id(sweep_id);
    sweep.set_max_concurrent(max_concurrent);
    for (size_t i = 0; i < indices.size(); ++i) {
      const std::string id = absl::StrCat("job-", first + static_cast<int>(i));
      v1::Event event;
      v1::Job job = JobStateMachine::NewJob(Spec(1), "alice", clock_.Now(), &event);
      job.set_id(id);
      job.set_sweep_id(sweep_id);
      job.set_sweep_index(indices[i]);
      jobs_.Add(std::move(job));
      sweep.add_job_ids(id);
    }
    sweeps_->Add(sweep);
  }
  Effects Pass() {
    Effects fx;
    cycle_.Run(&fx);
    return fx;
  }
  // The jobs of `ids` that `fx` moved to SCHEDULED.
  static std::vector<std::string> Scheduled(Effects& fx, const std::vector<std::string>& ids) {
    std::vector<std::string> out;
    for (const std::string& id : ids) {
      for (v1::Job::State s : States(fx, id)) {
        if (s == v1::Job::SCHEDULED) out.push_back(id);
      }
    }
    return out;
  }
  // Every rank of `id` runs, then exits 0: the job SUCCEEDS.
  void Succeed(const std::string& id) {
    Effects fx;
    Ranks(id, v1::RankState::RUNNING, &fx);
    Ranks(id, v1::RankState::EXITED, &fx);
    ASSERT_EQ(Job(id).state(), v1::Job::SUCCEEDED);
  }
  const std::vector<std::string> five_{"job-1", "job-2", "job-3", "job-4", "job-5"};
};

TEST_F(SweepGateTest, APassPlacesNoMoreThanMaxConcurrentEvenWithRoomForAll) {
  Connect("w1", 8);
  AddSweep("sweep-1", 2, 1, {0, 1, 2, 3, 4});
  Effects first = Pass();
  EXPECT_THAT(Scheduled(first, five_), ElementsAre("job-1", "job-2"));
  EXPECT_EQ(Job("job-3").pending_reason(), "sweep sweep-1: 2 of its children running or starting (max_concurrent 2)");
  // Held children are out of the queue: no position, no reservation.
  EXPECT_THAT(cycle_.queue_order(), IsEmpty());
  // Nothing changes while both run.
  Effects again = Pass();
  EXPECT_THAT(Scheduled(again, five_), IsEmpty());
}

TEST_F(SweepGateTest, AChildThatEndsLetsExactlyTheNextIndexIn) {
  Connect("w1", 8);
  AddSweep("sweep-1", 2, 1, {0, 1, 2, 3, 4});
  Pass();
  Succeed("job-1");
  Effects next = Pass();
  EXPECT_THAT(Scheduled(next, five_), ElementsAre("job-3"));
  Succeed("job-2");
  Succeed("job-3");
  Effects two = Pass();
  EXPECT_THAT(Scheduled(two, five_), ElementsAre("job-4", "job-5"));
}

TEST_F(SweepGateTest, ChildrenStartInIndexOrderNotIdOrder) {
  Connect("w1", 8);
  // job-1 is index 4 ... job-5 is index 0.
  AddSweep("sweep-1", 2, 1, {4, 3, 2, 1, 0});
  Effects first = Pass();
  EXPECT_THAT(Scheduled(first, five_), ElementsAre("job-4", "job-5"));
}

TEST_F(SweepGateTest, ASweepWithoutALimitAndOtherJobsAreNotHeld) {
  Connect("w1", 8);
  AddSweep("sweep-1", 0, 1, {0, 1, 2});
  AddSweep("sweep-2", 1, 4, {0, 1});
  Add("job-6", Spec(1));
  Effects first = Pass();
  EXPECT_THAT(Scheduled(first, {"job-1", "job-2", "job-3", "job-4", "job-5", "job-6"}),
              ElementsAre("job-1", "job-2", "job-3", "job-4", "job-6"));
  EXPECT_EQ(Job("job-5").pending_reason(), "sweep sweep-2: 1 of its children running or starting (max_concurrent 1)");
}

TEST_F(SweepGateTest, AChildLeftUnplacedForWantOfSlotsKeepsItsTurn) {
  Connect("w1", 1);
  AddSweep("sweep-1", 2, 1, {0, 1, 2});
  Effects first = Pass();
  // One slot: job-1 placed; job-2 was let in but waits for a slot in the queue, and
  // job-3 is held by the gate rather than queued behind it.
  EXPECT_THAT(Scheduled(first, {"job-1", "job-2", "job-3"}), ElementsAre("job-1"));
  EXPECT_THAT(cycle_.queue_order(), ElementsAre("job-2"));
  EXPECT_EQ(Job("job-3").pending_reason(), "sweep sweep-1: 2 of its children running or starting (max_concurrent 2)");
}

TEST_F(SweepGateTest, ACancelledChildCountsUntilItsRanksHaveLeftTheirSlots) {
  Connect("w1", 8);
  AddSweep("sweep-1", 1, 1, {0, 1});
  Pass();
  Effects running;
  Ranks("job-1", v1::RankState::RUNNING, &running);
  Effects cancel;
  ASSERT_TRUE(jobs_.Cancel("job-1", "by hand", &cancel).ok());
  ASSERT_EQ(Job("job-1").state(), v1::Job::CANCELLED);
  // Its rank still runs (the worker has not answered the cancel): no second child yet.
  Effects early = Pass();
  EXPECT_THAT(Scheduled(early, {"job-2"}), IsEmpty());
  Effects killed;
  Ranks("job-1", v1::RankState::KILLED, &killed);
  Effects after = Pass();
  EXPECT_THAT(Scheduled(after, {"job-2"}), ElementsAre("job-2"));
}

}  // namespace
}  // namespace trainyard::testing
