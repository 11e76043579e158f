// WorkerRegistry's GPU part with plain values: which rank holds each GPU, health from
// heartbeat samples (sticky for the registration), hostile samples, and the views it
// gives the scheduler, admission and ListWorkers.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "server/state/worker_registry.h"
#include "tests/fakes/fake_clock.h"
#include "tests/fakes/fake_worker_channel.h"
#include "tests/server/state/gpu_fixture.h"

namespace trainyard::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

class GpuRegistryTest : public ::testing::Test {
 protected:
  void Register(int64_t conn, const v1::Register& reg) {
    Effects fx;
    absl::Status s = registry_.Register(conn, reg, std::make_shared<FakeWorkerChannel>(), &fx);
    ASSERT_TRUE(s.ok()) << s;
  }
  std::vector<int> FreeOf(const std::string& name) {
    for (const auto& w : registry_.ConnectedFree()) {
      if (w.name != name) continue;
      std::vector<int> out;
      for (const auto& g : FreeGpus(w)) out.push_back(g.index);
      return out;
    }
    return {-99};
  }
  v1::WorkerInfo Info(const std::string& name) {
    for (const auto& i : registry_.List()) {
      if (i.name() == name) return i;
    }
    ADD_FAILURE() << "no worker " << name;
    return {};
  }

  FakeClock clock_;
  WorkerRegistry registry_{&clock_, absl::Seconds(2), absl::Seconds(10)};
};

TEST_F(GpuRegistryTest, HoldsAreAccountedPerRankAndReleasedOnlyByTheirJob) {
  Register(1, GpuReg("g1", 4));
  EXPECT_THAT(FreeOf("g1"), ElementsAre(0, 1, 2, 3));
  EXPECT_TRUE(registry_.HoldGpu("g1", 1, {"job-1", 1, 0}));
  EXPECT_TRUE(registry_.HoldGpu("g1", 1, {"job-1", 1, 0})) << "the same holder again is no conflict";
  EXPECT_FALSE(registry_.HoldGpu("g1", 1, {"job-2", 1, 0}));
  EXPECT_TRUE(registry_.HoldGpu("g1", 3, {"job-2", 1, 0}));
  EXPECT_THAT(FreeOf("g1"), ElementsAre(0, 2));
  ASSERT_TRUE(registry_.GpuHeldBy("g1", 1).has_value());
  EXPECT_EQ(registry_.GpuHeldBy("g1", 1)->job_id, "job-1");
  registry_.ReleaseGpu("g1", 1, "job-2");  // not its GPU
  EXPECT_THAT(FreeOf("g1"), ElementsAre(0, 2));
  registry_.ReleaseGpu("g1", 1, "job-1");
  EXPECT_THAT(FreeOf("g1"), ElementsAre(0, 1, 2));
  EXPECT_EQ(registry_.GpuUuid("g1", 2), "GPU-g1-2");
  EXPECT_EQ(registry_.GpuUuid("g1", 9), "");
  // The idle view frees every healthy GPU.
  ASSERT_EQ(registry_.ConnectedTotal().size(), 1u);
  EXPECT_EQ(FreeGpus(registry_.ConnectedTotal()[0]).size(), 4u);
}

// A stray rank (its attempt given up, the rank not yet reported gone) keeps its GPU as
// well as its slot: a new rank there would start beside a dying one.
TEST_F(GpuRegistryTest, AStrayRankHoldsItsGpuUntilTheWorkerReportsItGone) {
  Register(1, GpuReg("g1", 2));
  registry_.HoldStray("g1", StrayRank{"job-1", 1, 0, /*gpu=*/1});
  EXPECT_THAT(FreeOf("g1"), ElementsAre(0));
  ASSERT_TRUE(registry_.GpuHeldBy("g1", 1).has_value());
  EXPECT_EQ(registry_.GpuHeldBy("g1", 1)->attempt, 1);
  EXPECT_FALSE(registry_.RankGone("g1", "job-1", 2, 0)) << "another attempt's rank";
  EXPECT_THAT(FreeOf("g1"), ElementsAre(0));
  EXPECT_TRUE(registry_.RankGone("g1", "job-1", 1, 0));
  EXPECT_THAT(FreeOf("g1"), ElementsAre(0, 1));
  // A registration states its strays afresh: the GPUs of the old ones come back.
  registry_.SetStrays("g1", {StrayRank{"job-2", 3, 0, 0}, StrayRank{"job-2", 3, 1, -1}});
  EXPECT_THAT(FreeOf("g1"), ElementsAre(1));
  registry_.SetStrays("g1", {});
  EXPECT_THAT(FreeOf("g1"), ElementsAre(0, 1));
}

TEST_F(GpuRegistryTest, ARegisterWithDuplicateGpusChangesNothing) {
  v1::Register dup = GpuReg("g1", 2);
  dup.mutable_gpus(1)->set_uuid("GPU-g1-0");
  Effects fx;
  absl::Status s = registry_.Register(1, dup, std::make_shared<FakeWorkerChannel>(), &fx);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "Register.gpus.uuid: lists GPU-g1-0 twice");
  EXPECT_THAT(registry_.List(), IsEmpty());
}

TEST_F(GpuRegistryTest, AnUnhealthySampleTakesTheGpuOutForTheRegistration) {
  Register(1, GpuReg("g1", 2));
  EXPECT_THAT(registry_.Heartbeat(1, Beat({Sample(0), Sample(1)})), IsEmpty());
  std::vector<GpuFault> faults = registry_.Heartbeat(1, Beat({Sample(0), Broken(1, "uncorrectable ECC errors: 1")}));
  ASSERT_EQ(faults.size(), 1u);
  EXPECT_EQ(faults[0].worker, "g1");
  EXPECT_EQ(faults[0].index, 1);
  EXPECT_EQ(faults[0].uuid, "GPU-g1-1");
  EXPECT_EQ(faults[0].reason, "uncorrectable ECC errors: 1");
  EXPECT_THAT(FreeOf("g1"), ElementsAre(0));
  EXPECT_THAT(registry_.Heartbeat(1, Beat({Broken(1, "uncorrectable ECC errors: 2")})), IsEmpty())
      << "already out of service";
  // Sticky: a healthy report later in the same registration does not bring it back.
  registry_.Heartbeat(1, Beat({Sample(1)}));
  EXPECT_THAT(FreeOf("g1"), ElementsAre(0));
  EXPECT_THAT(Info("g1").unhealthy_gpus(), ElementsAre(1));
  // A re-registration (the worker reconnected) that reports it healthy clears it.
  ASSERT_TRUE(registry_.Disconnect(1));
  Register(2, GpuReg("g1", 2));
  EXPECT_THAT(FreeOf("g1"), ElementsAre(0)) << "out of service until a sample says otherwise";
  registry_.Heartbeat(2, Beat({Sample(0), Sample(1)}));
  EXPECT_THAT(FreeOf("g1"), ElementsAre(0, 1));
  EXPECT_THAT(Info("g1").unhealthy_gpus(), IsEmpty());
  // ...while one that reports it broken again keeps it out (and reports no new fault).
  registry_.Heartbeat(2, Beat({Broken(0, "GPU is lost")}));
  ASSERT_TRUE(registry_.Disconnect(2));
  Register(3, GpuReg("g1", 2));
  EXPECT_THAT(registry_.Heartbeat(3, Beat({Broken(0, "GPU is lost")})), IsEmpty());
  EXPECT_THAT(FreeOf("g1"), ElementsAre(1));
}

TEST_F(GpuRegistryTest, HostileSamplesAreDroppedNeverStored) {
  Register(1, GpuReg("g1", 2));
  v1::GpuSample nan = Sample(0);
  nan.set_utilization(std::nan(""));
  nan.set_power_watts(std::numeric_limits<double>::infinity());
  nan.set_temperature_celsius(-40);
  nan.set_memory_used_bytes(-7);
  v1::GpuSample unknown = Broken(7, "x");  // GPU 7 was never registered
  v1::GpuSample second = Broken(0, "a second sample for GPU 0");
  EXPECT_THAT(registry_.Heartbeat(1, Beat({nan, unknown, second})), IsEmpty());
  v1::WorkerInfo info = Info("g1");
  ASSERT_EQ(info.gpu_samples_size(), 1);
  const v1::GpuSample& s = info.gpu_samples(0);
  EXPECT_EQ(s.index(), 0);
  EXPECT_EQ(s.utilization(), -1);
  EXPECT_EQ(s.power_watts(), -1);
  EXPECT_EQ(s.temperature_celsius(), -1);
  EXPECT_EQ(s.memory_used_bytes(), -1);
  EXPECT_TRUE(s.healthy());
  EXPECT_THAT(FreeOf("g1"), ElementsAre(0, 1));
  // A sample on a connection no worker holds changes nothing.
  EXPECT_THAT(registry_.Heartbeat(42, Beat({Broken(0, "x")})), IsEmpty());
  // A huge reason is cut before it is kept.
  registry_.Heartbeat(1, Beat({Broken(1, std::string(5000, 'r'))}));
  EXPECT_LT(Info("g1").gpu_samples(1).unhealthy_reason().size(), 200u);
}

TEST_F(GpuRegistryTest, AHeartbeatIsReadOnlyAsFarAsOneSamplePerRegisteredGpu) {
  Register(1, GpuReg("g1", 2));
  // Two GPUs registered: only the first two samples are read, however many follow (a
  // huge heartbeat must not hold the state lock), so the unhealthy third is not seen.
  std::vector<v1::GpuSample> samples = {Broken(7, "x"), Broken(8, "y"), Broken(1, "z")};
  for (int i = 0; i < 100000; ++i) samples.push_back(Broken(1, "flood"));
  EXPECT_THAT(registry_.Heartbeat(1, Beat(samples)), IsEmpty());
  EXPECT_THAT(FreeOf("g1"), ElementsAre(0, 1));
  EXPECT_EQ(Info("g1").gpu_samples_size(), 0);
}

TEST_F(GpuRegistryTest, ListWorkersShowsDevicesSamplesAndAccounting) {
  v1::Register reg = GpuReg("g1", 3, {1, 1, 0});
  reg.add_nccl_env("NCCL_IB_DISABLE=1");
  Register(1, reg);
  registry_.Reserve("g1");
  registry_.HoldGpu("g1", 0, {"job-1", 1, 0});
  registry_.Heartbeat(1, Beat({Sample(0), Broken(2, "XID 79")}));
  v1::WorkerInfo info = Info("g1");
  EXPECT_EQ(info.device(), "cuda");
  EXPECT_EQ(info.memory_bytes(), int64_t{512} << 30);
  ASSERT_EQ(info.gpus_size(), 3);
  EXPECT_EQ(info.gpus(1).uuid(), "GPU-g1-1");
  EXPECT_EQ(info.gpu_samples_size(), 2);
  EXPECT_THAT(info.free_gpus(), ElementsAre(1));
  EXPECT_THAT(info.unhealthy_gpus(), ElementsAre(2));
  EXPECT_TRUE(info.capabilities().cuda());
  EXPECT_EQ(info.capabilities().libtorch_version(), "2.5.1");
  EXPECT_EQ(info.gpu_driver_version(), "580.159.04");
  EXPECT_EQ(info.cuda_driver_version(), "13.0");
  EXPECT_TRUE(info.nvlink_topology_known());
  EXPECT_THAT(info.nccl_env(), ElementsAre("NCCL_IB_DISABLE=1"));
  EXPECT_EQ(info.free_slots(), 2);
  // Admission's view: the largest healthy GPU, the engine.
  std::vector<FleetWorker> fleet = registry_.ConnectedFleet();
  ASSERT_EQ(fleet.size(), 1u);
  EXPECT_EQ(fleet[0].gpus, 3);
  EXPECT_EQ(fleet[0].largest_gpu_memory_bytes, int64_t{140} << 30);
  EXPECT_EQ(fleet[0].largest_gpu_index, 0);
  EXPECT_TRUE(fleet[0].bf16);
  EXPECT_FALSE(fleet[0].cudagraph);
  // A CPU worker says so.
  v1::Register cpu;
  cpu.set_name("c1");
  cpu.set_slots(2);
  cpu.set_rendezvous_port_min(100);
  cpu.set_rendezvous_port_max(110);
  Register(2, cpu);
  EXPECT_EQ(Info("c1").device(), "cpu");
  EXPECT_EQ(Info("c1").gpus_size(), 0);
}

}  // namespace
}  // namespace trainyard::testing
