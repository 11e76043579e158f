#include "server/gang_scheduler.h"

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
  EXPECT_EQ(d.pending_reason, "needs 4 slots with TP=4 inside one worker; largest free block is 2");
  // TP=2 groups fit one per worker.
  auto ok = GangScheduler::Place("j", Spec(2, 2), {{"a", 3}, {"b", 2}});
  ASSERT_TRUE(ok.placed);
  EXPECT_EQ(ok.rank_workers, (std::vector<std::string>{"a", "a", "b", "b"}));
}

TEST(GangSchedulerTest, NotEnoughSlotsSaysHowMany) {
  auto d = GangScheduler::Place("j", Spec(4, 1), {{"a", 1}, {"b", 2}});
  EXPECT_FALSE(d.placed);
  EXPECT_EQ(d.pending_reason, "needs 4 slots; 3 free across 2 workers");
  auto none = GangScheduler::Place("j", Spec(1, 1), {});
  EXPECT_EQ(none.pending_reason, "needs 1 slots; no workers connected");
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
  auto ds = GangScheduler::PlaceQueue({{"j1", &two}, {"j2", &three}, {"j3", &one}}, {{"w", 4}});
  ASSERT_EQ(ds.size(), 3u);
  EXPECT_TRUE(ds[0].placed);
  EXPECT_FALSE(ds[1].placed);
  EXPECT_EQ(ds[1].pending_reason, "needs 3 slots; 2 free across 1 workers");
  // j3 would fit in the 2 slots left, but waits behind j2 so j2 is not starved.
  EXPECT_FALSE(ds[2].placed);
  EXPECT_EQ(ds[2].pending_reason, "queued behind j2");
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
  auto ds = GangScheduler::PlaceQueue(queue, {{"w", 2}});
  ASSERT_EQ(ds.size(), 2u);
  EXPECT_EQ(ds[0].job_id, "big");
  EXPECT_FALSE(ds[0].placed);
  EXPECT_EQ(ds[1].pending_reason, "queued behind big");
}

}  // namespace
}  // namespace trainyard
