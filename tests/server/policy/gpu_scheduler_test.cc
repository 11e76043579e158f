// GangScheduler with GPU workers: a CUDA job's capacity is min(free slots, free healthy
// GPUs), each rank gets a GPU, a TP group gets one NVLink domain when it can, CPU jobs
// take slots only, and pending reasons and backfill count GPUs.
#include <gtest/gtest.h>

#include "server/policy/gang_scheduler.h"

namespace trainyard {
namespace {

v1::JobSpec Cuda(int dp, int tp, int time_limit_s = 0) {
  v1::JobSpec spec;
  spec.mutable_parallelism()->set_dp(dp);
  spec.mutable_parallelism()->set_tp(tp);
  spec.mutable_resources()->set_device("cuda");
  spec.mutable_job()->set_time_limit_s(time_limit_s);
  return spec;
}

v1::JobSpec Cpu(int dp) {
  v1::JobSpec spec = Cuda(dp, 1);
  spec.mutable_resources()->set_device("cpu");
  return spec;
}

// A CUDA worker with `n` GPUs (index i in domain domains[i] when given), every one free.
WorkerSnapshot GpuWorkerSnapshot(const std::string& name, int n, std::vector<int> domains = {}) {
  WorkerSnapshot w;
  w.name = name;
  w.free_slots = n;
  w.engine_cuda = true;
  w.nvlink_topology_known = !domains.empty();
  for (int i = 0; i < n; ++i) w.gpus.push_back({i, domains.empty() ? 0 : domains[i], true, false});
  return w;
}

void Hold(WorkerSnapshot* w, std::vector<int> indices) {
  for (int i : indices) {
    w->gpus[i].held = true;
    --w->free_slots;
  }
}

TEST(GpuSchedulerTest, TwoTp4JobsTakeDisjointHalvesOfAnEightGpuWorkerAndAThirdWaitsNamingGpus) {
  v1::JobSpec a = Cuda(1, 4), b = Cuda(1, 4), c = Cuda(1, 4);
  auto ds =
      GangScheduler::PlanQueue({{"a", &a, 0, {}}, {"b", &b, 1, {}}, {"c", &c, 2, {}}}, {GpuWorkerSnapshot("w1", 8)});
  ASSERT_EQ(ds.size(), 3u);
  ASSERT_TRUE(ds[0].placed) << ds[0].pending_reason;
  ASSERT_TRUE(ds[1].placed) << ds[1].pending_reason;
  EXPECT_EQ(ds[0].rank_workers, (std::vector<std::string>(4, "w1")));
  EXPECT_EQ(ds[0].rank_gpus, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(ds[1].rank_gpus, (std::vector<int>{4, 5, 6, 7}));
  EXPECT_FALSE(ds[2].placed);
  EXPECT_EQ(ds[2].pending_reason,
            "needs 4 GPUs with TP=4 inside one worker; free GPUs: w1=0 (8 GPUs, 8 held); no start estimate until "
            "the jobs it waits for report a step time or declare job.time_limit_s");
}

TEST(GpuSchedulerTest, ATpPairStaysInsideOneNvlinkDomain) {
  // Domains 1 = GPUs 0-3 and 2 = GPUs 4-7.
  const std::vector<int> domains = {1, 1, 1, 1, 2, 2, 2, 2};
  WorkerSnapshot w = GpuWorkerSnapshot("w1", 8, domains);
  Hold(&w, {0, 2, 3, 6});  // free: 1 (domain 1), 4, 5, 7 (domain 2)
  auto d = GangScheduler::Place("j", Cuda(1, 2), {w});
  ASSERT_TRUE(d.placed) << d.pending_reason;
  EXPECT_EQ(d.rank_gpus, (std::vector<int>{4, 5})) << "the lowest free pair, 1 and 4, spans two domains";

  // Free 0, 1, 4, 5: both domains have a pair; the lowest domain's is taken.
  WorkerSnapshot even = GpuWorkerSnapshot("w1", 8, domains);
  Hold(&even, {2, 3, 6, 7});
  auto e = GangScheduler::Place("j", Cuda(1, 2), {even});
  ASSERT_TRUE(e.placed);
  EXPECT_EQ(e.rank_gpus, (std::vector<int>{0, 1}));

  // Best fit: domain 1 has 2 free, domain 2 has 3; the pair takes domain 1 and leaves
  // domain 2 room for a larger group.
  WorkerSnapshot fit = GpuWorkerSnapshot("w1", 8, domains);
  Hold(&fit, {0, 1, 4});
  auto f = GangScheduler::Place("j", Cuda(1, 2), {fit});
  ASSERT_TRUE(f.placed);
  EXPECT_EQ(f.rank_gpus, (std::vector<int>{2, 3}));

  // Without a known topology: the lowest free indices.
  WorkerSnapshot unknown = w;
  unknown.nvlink_topology_known = false;
  auto u = GangScheduler::Place("j", Cuda(1, 2), {unknown});
  ASSERT_TRUE(u.placed);
  EXPECT_EQ(u.rank_gpus, (std::vector<int>{1, 4}));

  // No domain has room for a group of 4: lowest free indices, across domains.
  auto spill = GangScheduler::Place("j", Cuda(1, 4), {w});
  ASSERT_TRUE(spill.placed);
  EXPECT_EQ(spill.rank_gpus, (std::vector<int>{1, 4, 5, 7}));
}

TEST(GpuSchedulerTest, CpuJobsOnAGpuWorkerTakeSlotsButNoGpu) {
  WorkerSnapshot w = GpuWorkerSnapshot("w1", 4);
  v1::JobSpec cpu = Cpu(2), cuda = Cuda(3, 1);
  auto ds = GangScheduler::PlanQueue({{"cpu", &cpu, 0, {}}, {"cuda", &cuda, 1, {}}}, {w});
  ASSERT_TRUE(ds[0].placed);
  EXPECT_EQ(ds[0].rank_gpus, (std::vector<int>{-1, -1}));
  // Two slots are left, so the CUDA job's capacity is 2 although 4 GPUs are free.
  EXPECT_FALSE(ds[1].placed);
  EXPECT_EQ(ds[1].pending_reason.substr(0, 55), "needs 3 GPUs; free GPUs: w1=4 (4 GPUs, 0 held, 2 free s");
}

TEST(GpuSchedulerTest, CudaJobsUseOnlyWorkersWithGpusAndACudaEngine) {
  WorkerSnapshot cpu{"c1", 8};
  WorkerSnapshot no_engine = GpuWorkerSnapshot("g0", 2);
  no_engine.engine_cuda = false;
  auto none = GangScheduler::Place("j", Cuda(1, 1), {cpu, no_engine});
  EXPECT_FALSE(none.placed);
  EXPECT_EQ(none.pending_reason,
            "needs 1 GPU; none of the 2 connected workers can run it (c1: no GPUs, its engine is not built with "
            "CUDA; g0: its engine is not built with CUDA)");
  auto d = GangScheduler::Place("j", Cuda(2, 1), {cpu, no_engine, GpuWorkerSnapshot("g1", 2)});
  ASSERT_TRUE(d.placed) << d.pending_reason;
  EXPECT_EQ(d.rank_workers, (std::vector<std::string>{"g1", "g1"}));
  auto big = GangScheduler::Place("j", Cuda(3, 1), {cpu, GpuWorkerSnapshot("g1", 2)});
  EXPECT_EQ(big.pending_reason,
            "needs 3 GPUs; free GPUs: g1=2 (2 GPUs, 0 held); not eligible: c1: no GPUs, its engine is not built "
            "with CUDA");
}

TEST(GpuSchedulerTest, AnUnhealthyGpuIsNeverPlacedOn) {
  WorkerSnapshot w = GpuWorkerSnapshot("w1", 2);
  w.gpus[0].healthy = false;
  auto one = GangScheduler::Place("j", Cuda(1, 1), {w});
  ASSERT_TRUE(one.placed);
  EXPECT_EQ(one.rank_gpus, (std::vector<int>{1}));
  auto two = GangScheduler::Place("j", Cuda(2, 1), {w});
  EXPECT_FALSE(two.placed);
  EXPECT_EQ(two.pending_reason, "needs 2 GPUs; free GPUs: w1=1 (2 GPUs, 0 held, 1 unhealthy)");
}

TEST(GpuSchedulerTest, EngineCapabilitiesGateCudagraphAndBf16) {
  v1::JobSpec graph = Cuda(1, 1);
  graph.mutable_compile()->set_backend("cudagraph");
  WorkerSnapshot plain = GpuWorkerSnapshot("g1", 1);
  WorkerSnapshot capable = GpuWorkerSnapshot("g2", 1);
  capable.engine_cudagraph = true;
  auto d = GangScheduler::Place("j", graph, {plain, capable});
  ASSERT_TRUE(d.placed);
  EXPECT_EQ(d.rank_workers, (std::vector<std::string>{"g2"}));
  v1::JobSpec bf16 = Cpu(1);
  bf16.mutable_training()->set_mixed_precision("bf16");
  auto b = GangScheduler::Place("j", bf16, {WorkerSnapshot{"c1", 4}});
  EXPECT_EQ(b.pending_reason, "needs 1 slot; the one connected worker cannot run it (c1: its engine lacks bf16)");
}

// EASY backfill over GPUs: "run" holds GPUs 0-3 of an 8-GPU worker for 100 s more; the
// head needs all 8 (TP=8) and is reserved at 100 s; the free GPUs 4-7 may run a job
// that ends before then, not one that would still hold them.
TEST(GpuSchedulerTest, BackfillCountsGpus) {
  WorkerSnapshot w = GpuWorkerSnapshot("w1", 8);
  Hold(&w, {0, 1, 2, 3});
  std::vector<RunningJob> running = {{"run", {"w1", "w1", "w1", "w1"}, absl::Seconds(100), {0, 1, 2, 3}}};
  v1::JobSpec head = Cuda(1, 8), short_job = Cuda(1, 4, 60), long_job = Cuda(1, 4);
  auto ds = GangScheduler::PlanQueue({{"head", &head, 0, {}}, {"short", &short_job, 1, {}}}, {w}, running);
  EXPECT_FALSE(ds[0].placed);
  ASSERT_TRUE(ds[0].estimated_start.has_value());
  EXPECT_EQ(*ds[0].estimated_start, absl::Seconds(100));
  EXPECT_EQ(ds[0].reserved_workers, (std::vector<std::string>(8, "w1")));
  ASSERT_TRUE(ds[1].placed) << ds[1].pending_reason;
  EXPECT_TRUE(ds[1].backfilled);
  EXPECT_EQ(ds[1].rank_gpus, (std::vector<int>{4, 5, 6, 7}));

  auto blocked = GangScheduler::PlanQueue({{"head", &head, 0, {}}, {"long", &long_job, 1, {}}}, {w}, running);
  EXPECT_FALSE(blocked[1].placed);
  EXPECT_EQ(blocked[1].pending_reason, "queued behind head; starting now would delay its reservation");
}

}  // namespace
}  // namespace trainyard

namespace trainyard {
namespace {

// A mixed fleet: a rank that needs 40 GiB never lands on a 24 GiB GPU.
TEST(GpuSchedulerMemoryTest, GpusSmallerThanARankAreNotUsed) {
  WorkerSnapshot small("s1", 4), large("l1", 2);
  small.engine_cuda = large.engine_cuda = true;
  for (int i = 0; i < 4; ++i) small.gpus.push_back({i, 0, true, false, int64_t{24} << 30});
  for (int i = 0; i < 2; ++i) large.gpus.push_back({i, 0, true, false, int64_t{80} << 30});
  v1::JobSpec spec;
  spec.mutable_parallelism()->set_dp(2);
  spec.mutable_parallelism()->set_tp(1);
  spec.mutable_resources()->set_device("cuda");
  const int64_t need = int64_t{40} << 30;
  auto d = GangScheduler::Place("j", spec, {small, large}, need);
  ASSERT_TRUE(d.placed) << d.pending_reason;
  EXPECT_EQ(d.rank_workers, (std::vector<std::string>{"l1", "l1"})) << "s1 has more free GPUs, all too small";
  spec.mutable_parallelism()->set_dp(3);
  auto wait = GangScheduler::Place("j", spec, {small, large}, need);
  EXPECT_FALSE(wait.placed);
  EXPECT_EQ(wait.pending_reason,
            "needs 3 GPUs; free GPUs: l1=2 (2 GPUs, 0 held), s1=0 (4 GPUs, 0 held, 4 smaller than the 40 GiB a rank "
            "needs)");
  // Without an estimate every GPU counts.
  EXPECT_TRUE(GangScheduler::Place("j", spec, {small, large}).placed);
}

}  // namespace
}  // namespace trainyard
