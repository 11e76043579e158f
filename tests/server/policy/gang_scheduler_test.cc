#include "server/policy/gang_scheduler.h"

#include <gtest/gtest.h>

namespace trainyard {
namespace {

v1::JobSpec Spec(int dp, int tp, int ranks_per_worker = 0) {
  v1::JobSpec spec;
  spec.mutable_parallelism()->set_dp(dp);
  spec.mutable_parallelism()->set_tp(tp);
  spec.mutable_resources()->set_ranks_per_worker(ranks_per_worker);
  return spec;
}

TEST(GangSchedulerTest, PlacesWholeGangOnMostFreeWorkerFirst) {
  auto d = GangScheduler::Place("j", Spec(2, 1), {{"a", 1}, {"b", 3}});
  ASSERT_TRUE(d.placed) << d.pending_reason;
  EXPECT_EQ(d.rank_workers, (std::vector<std::string>{"b", "b"}));
}

TEST(GangSchedulerTest, SpreadsDataParallelAcrossWorkers) {
  auto d = GangScheduler::Place("j", Spec(3, 1), {{"a", 2}, {"b", 1}});
  ASSERT_TRUE(d.placed);
  EXPECT_EQ(d.rank_workers, (std::vector<std::string>{"a", "a", "b"}));
}

TEST(GangSchedulerTest, TensorParallelGroupNeverSpansWorkers) {
  // 4 free slots in total, but no worker holds a whole TP=4 group.
  auto d = GangScheduler::Place("j", Spec(1, 4), {{"a", 2}, {"b", 2}});
  EXPECT_FALSE(d.placed);
  EXPECT_EQ(d.pending_reason, "needs 4 slots with TP=4 inside one worker; 4 free: a=2, b=2");
  // TP=2 groups fit one per worker.
  auto ok = GangScheduler::Place("j", Spec(2, 2), {{"a", 3}, {"b", 2}});
  ASSERT_TRUE(ok.placed);
  EXPECT_EQ(ok.rank_workers, (std::vector<std::string>{"a", "a", "b", "b"}));
}

TEST(GangSchedulerTest, NotEnoughSlotsSaysHowMany) {
  auto d = GangScheduler::Place("j", Spec(4, 1), {{"a", 1}, {"b", 2}});
  EXPECT_FALSE(d.placed);
  EXPECT_EQ(d.pending_reason, "needs 4 slots; 3 free: b=2, a=1");
  auto none = GangScheduler::Place("j", Spec(1, 1), {});
  EXPECT_EQ(none.pending_reason, "needs 1 slot; no workers connected");
}

TEST(GangSchedulerTest, RanksPerWorkerCapsEachWorker) {
  auto d = GangScheduler::Place("j", Spec(2, 1, 1), {{"a", 4}, {"b", 4}});
  ASSERT_TRUE(d.placed);
  EXPECT_EQ(d.rank_workers, (std::vector<std::string>{"a", "b"}));
  auto no = GangScheduler::Place("j", Spec(2, 1, 1), {{"a", 4}});
  EXPECT_FALSE(no.placed);
}

TEST(GangSchedulerTest, QueueIsStrictlyOrderedAndConsumesCapacity) {
  v1::JobSpec one = Spec(1, 1), two = Spec(2, 1), three = Spec(3, 1);
  auto ds = GangScheduler::PlanQueue({{"j1", &two}, {"j2", &three}, {"j3", &one}}, {{"w", 4}});
  ASSERT_EQ(ds.size(), 3u);
  EXPECT_TRUE(ds[0].placed);
  EXPECT_FALSE(ds[1].placed);
  EXPECT_EQ(ds[1].pending_reason,
            "needs 3 slots; 2 free: w=2; no start estimate until the jobs it waits for report a "
            "step time or declare job.time_limit_s");
  EXPECT_FALSE(ds[1].estimated_start.has_value());
  // j3 would fit in the 2 slots left, but j1 (just placed) has no time limit, so j2's
  // start cannot be estimated and nothing may pass it: j2 is not starved.
  EXPECT_FALSE(ds[2].placed);
  EXPECT_EQ(ds[2].pending_reason, "queued behind j2, whose start cannot be estimated");
}

}  // namespace
}  // namespace trainyard

namespace trainyard {
namespace {

v1::JobSpec WithPriority(int priority) {
  v1::JobSpec spec;
  spec.mutable_job()->set_priority(priority);
  return spec;
}

TEST(QueueOrderTest, HigherPriorityFirstThenFifo) {
  v1::JobSpec p0 = WithPriority(0), p5 = WithPriority(5), neg = WithPriority(-3);
  std::vector<QueuedJob> queue = {
      {"a", &p0, 4}, {"b", &neg, 1}, {"c", &p5, 9}, {"d", &p0, 2}, {"e", &p5, 3}};
  GangScheduler::OrderQueue(&queue);
  std::vector<std::string> ids;
  for (const auto& q : queue) ids.push_back(q.id);
  EXPECT_EQ(ids, (std::vector<std::string>{"e", "c", "d", "a", "b"}));
}

TEST(QueueOrderTest, OrderedQueueBlocksBehindTheHighestPriorityJob) {
  v1::JobSpec big = Spec(3, 1), small = Spec(1, 1);
  big.mutable_job()->set_priority(1);
  std::vector<QueuedJob> queue = {{"small", &small, 0}, {"big", &big, 1}};
  GangScheduler::OrderQueue(&queue);
  auto ds = GangScheduler::PlanQueue(queue, {{"w", 2}});
  ASSERT_EQ(ds.size(), 2u);
  EXPECT_EQ(ds[0].job_id, "big");
  EXPECT_FALSE(ds[0].placed);
  EXPECT_EQ(ds[1].pending_reason, "queued behind big, whose start cannot be estimated");
}

v1::JobSpec Limited(int dp, int tp, int time_limit_s) {
  v1::JobSpec spec = Spec(dp, tp);
  spec.mutable_job()->set_time_limit_s(time_limit_s);
  return spec;
}

// EASY: the fleet is w1 (4 slots) and w2 (4 slots). "run" holds 3 slots of w1 and 2 of
// w2 and ends in 100 s; 3 slots are free (w1=1, w2=2). The head needs TP=4 inside one
// worker: it gets the reservation on w1 at 100 s.
class BackfillTest : public ::testing::Test {
 protected:
  std::vector<WorkerSnapshot> workers_ = {{"w1", 1}, {"w2", 2}};
  std::vector<RunningJob> running_ = {
      {"run", {"w1", "w1", "w1", "w2", "w2"}, absl::Seconds(100)}};
  v1::JobSpec head_ = Spec(1, 4);
};

TEST_F(BackfillTest, TheHeadGetsAReservationAndAnEstimatedStart) {
  auto ds = GangScheduler::PlanQueue({{"head", &head_}}, workers_, running_);
  ASSERT_EQ(ds.size(), 1u);
  EXPECT_FALSE(ds[0].placed);
  EXPECT_EQ(ds[0].pending_reason,
            "needs 4 slots with TP=4 inside one worker; 3 free: w2=2, w1=1; reserved to start "
            "when run ends");
  ASSERT_TRUE(ds[0].estimated_start.has_value());
  EXPECT_EQ(*ds[0].estimated_start, absl::Seconds(100));
  EXPECT_EQ(ds[0].reserved_workers, (std::vector<std::string>{"w1", "w1", "w1", "w1"}));
}

TEST_F(BackfillTest, AShortJobThatEndsBeforeTheReservationStartsNow) {
  v1::JobSpec short_job = Limited(2, 1, 60);  // takes w2's two slots... for at most 60 s
  auto ds = GangScheduler::PlanQueue({{"head", &head_}, {"short", &short_job}}, workers_, running_);
  ASSERT_EQ(ds.size(), 2u);
  EXPECT_FALSE(ds[0].placed);
  EXPECT_TRUE(ds[1].placed);
  EXPECT_TRUE(ds[1].backfilled);
  EXPECT_EQ(*ds[0].estimated_start, absl::Seconds(100));  // not delayed
}

TEST_F(BackfillTest, ALongJobMayTakeOnlySlotsTheReservationLeavesFree) {
  // Unbounded, 2 slots: the head's reservation is all of w1, so the job fits on w2
  // (most free first) and runs past 100 s without touching w1.
  v1::JobSpec on_w2 = Spec(2, 1);
  auto ds = GangScheduler::PlanQueue({{"head", &head_}, {"long", &on_w2}}, workers_, running_);
  EXPECT_TRUE(ds[1].placed);
  EXPECT_EQ(ds[1].rank_workers, (std::vector<std::string>{"w2", "w2"}));

  // Unbounded, 3 slots: it would need w1's free slot, which is reserved: it waits.
  v1::JobSpec three = Spec(3, 1);
  ds = GangScheduler::PlanQueue({{"head", &head_}, {"long", &three}}, workers_, running_);
  EXPECT_FALSE(ds[1].placed);
  EXPECT_EQ(ds[1].pending_reason, "queued behind head; starting now would delay its reservation");
  // It starts after the head in the simulation: at 100 s w2 has 4 free (2 + run's 2),
  // w1 is the head's; three slots fit on w2.
  ASSERT_TRUE(ds[1].estimated_start.has_value());
  EXPECT_EQ(*ds[1].estimated_start, absl::Seconds(100));

  // Bounded but longer than the reservation, and needing a reserved slot: waits.
  v1::JobSpec too_long = Limited(3, 1, 101);
  ds = GangScheduler::PlanQueue({{"head", &head_}, {"long", &too_long}}, workers_, running_);
  EXPECT_FALSE(ds[1].placed);
}

TEST_F(BackfillTest, PriorityStillComesFirstAndBackfilledJobsKeepTheirOrder) {
  // Two short jobs that each fit now but not together: the first in queue order wins.
  v1::JobSpec a = Limited(2, 1, 10), b = Limited(2, 1, 10);
  b.mutable_job()->set_priority(5);
  std::vector<QueuedJob> queue = {{"head", &head_, 0}, {"a", &a, 1}, {"b", &b, 2}};
  head_.mutable_job()->set_priority(9);
  GangScheduler::OrderQueue(&queue);
  auto ds = GangScheduler::PlanQueue(queue, workers_, running_);
  ASSERT_EQ(ds.size(), 3u);
  EXPECT_EQ(ds[0].job_id, "head");
  EXPECT_EQ(ds[1].job_id, "b");
  EXPECT_TRUE(ds[1].placed);
  EXPECT_EQ(ds[2].job_id, "a");
  EXPECT_FALSE(ds[2].placed);
  // a waits for b's 10 s (or w1's slot at 100 s, which is the head's): b ends at 10 s.
  ASSERT_TRUE(ds[2].estimated_start.has_value());
  EXPECT_EQ(*ds[2].estimated_start, absl::Seconds(100));
}

TEST_F(BackfillTest, NoBackfillWhenTheRunningJobsEndIsUnknown) {
  running_[0].remaining.reset();
  v1::JobSpec short_job = Limited(1, 1, 1);
  auto ds = GangScheduler::PlanQueue({{"head", &head_}, {"short", &short_job}}, workers_, running_);
  EXPECT_FALSE(ds[0].estimated_start.has_value());
  EXPECT_TRUE(ds[0].reserved_workers.empty());
  EXPECT_FALSE(ds[1].placed);
  EXPECT_EQ(ds[1].pending_reason, "queued behind head, whose start cannot be estimated");
  EXPECT_FALSE(ds[1].estimated_start.has_value());
}

TEST_F(BackfillTest, AHeadTooBigForTheWholeFleetSaysSo) {
  v1::JobSpec huge = Spec(1, 8);  // TP=8: no worker has 8 slots
  auto ds = GangScheduler::PlanQueue({{"huge", &huge}}, workers_, running_);
  EXPECT_EQ(ds[0].pending_reason,
            "needs 8 slots with TP=8 inside one worker; 3 free: w2=2, w1=1; the connected "
            "workers are too few for it even when idle");
}

}  // namespace
}  // namespace trainyard
