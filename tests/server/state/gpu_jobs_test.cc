// GPU workers through JobManager (real SQLite store, fake clock and channels): GPUs in
// Assign and the stored placement, GPU capacity, an unhealthy GPU failing the attempt on
// it and the restart placed on other GPUs, the trainyard_worker_gpu_* series, and GPU
// holds restored after a controller restart.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/server/state/gpu_fixture.h"
#include "tests/server/state/manager_fixture.h"

namespace trainyard::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

class GpuJobsTest : public ManagerFixture {
 protected:
  Conn ConnectGpu(const v1::Register& reg) {
    Conn c{next_conn_++, reg.name(), nullptr};
    c.channel = std::make_shared<FakeWorkerChannel>([this, name = reg.name()](const std::string& l) { Log(name + ": " + l); });
    absl::Status s = manager_->RegisterWorker(c.id, reg, c.channel);
    EXPECT_TRUE(s.ok()) << s;
    return c;
  }
  static v1::JobSpec CudaSpec(int dp, int tp, int max_restarts = 0) {
    v1::JobSpec spec = Spec(dp, tp, max_restarts);
    spec.mutable_resources()->set_device("cuda");
    spec.mutable_restart()->set_backoff_s(0);
    return spec;
  }
  // The (rank, index, uuid) of every GPU in the newest Assign of `job` on `c`.
  static std::vector<std::string> AssignedGpus(const Conn& c, const std::string& job) {
    std::vector<std::string> out;
    for (const auto& m : c.channel->Of(v1::ControllerMessage::kAssign)) {
      if (m.assign().job_id() != job) continue;
      out.clear();
      for (const auto& g : m.assign().gpus()) {
        out.push_back(absl::StrCat(g.rank(), ":", g.index(), ":", g.uuid()));
      }
    }
    return out;
  }
  // The gauge `family`{worker, gpu}, or nullopt when the series does not exist.
  std::optional<double> Gauge(const std::string& family, const std::string& worker, int gpu) {
    for (const auto& f : metrics_.registry()->Collect()) {
      if (f.name != family) continue;
      for (const auto& m : f.metric) {
        std::map<std::string, std::string> labels;
        for (const auto& l : m.label) labels[l.name] = l.value;
        if (labels["worker"] == worker && labels["gpu"] == std::to_string(gpu)) return m.gauge.value;
      }
    }
    return std::nullopt;
  }
};

TEST_F(GpuJobsTest, EachRankGetsItsOwnGpuInAssignAndThePlacement) {
  v1::Register reg = GpuReg("g1", 4);
  reg.add_nccl_env("NCCL_IB_DISABLE=1");
  Conn g1 = ConnectGpu(reg);
  const std::string a = Submit(CudaSpec(1, 2));
  const std::string b = Submit(CudaSpec(1, 2));
  EXPECT_THAT(AssignedGpus(g1, a), ElementsAre("0:0:GPU-g1-0", "1:1:GPU-g1-1"));
  EXPECT_THAT(AssignedGpus(g1, b), ElementsAre("0:2:GPU-g1-2", "1:3:GPU-g1-3"));
  const v1::Placement stored = StoredJob(b).placement();
  ASSERT_EQ(stored.ranks_size(), 2);
  EXPECT_EQ(stored.ranks(1).gpu(), 3);
  EXPECT_EQ(stored.ranks(1).gpu_uuid(), "GPU-g1-3");
  ASSERT_EQ(stored.worker_env_size(), 1);
  EXPECT_EQ(stored.worker_env(0).worker(), "g1");
  EXPECT_THAT(stored.worker_env(0).nccl_env(), ElementsAre("NCCL_IB_DISABLE=1"));

  // Every GPU is held: a third CUDA job is admitted (it fits the idle fleet) and waits.
  const std::string c = Submit(CudaSpec(1, 2));
  EXPECT_EQ(Job(c).state(), v1::Job::PENDING);
  EXPECT_THAT(Job(c).pending_reason(), HasSubstr("needs 2 GPUs with TP=2 inside one worker; free GPUs: g1=0 (4 GPUs, 4 held)"));
  EXPECT_THAT(manager_->Workers()[0].free_gpus(), IsEmpty());

  // Job a's ranks end: their GPUs return and c takes them.
  Report(g1, a, 1, {0, 1}, v1::RankState::EXITED);
  EXPECT_EQ(Job(a).state(), v1::Job::SUCCEEDED);
  EXPECT_EQ(Job(c).state(), v1::Job::SCHEDULED);
  EXPECT_THAT(AssignedGpus(g1, c), ElementsAre("0:0:GPU-g1-0", "1:1:GPU-g1-1"));
}

TEST_F(GpuJobsTest, CpuJobsOnAGpuWorkerTakeNoGpu) {
  Conn g1 = ConnectGpu(GpuReg("g1", 2));
  const std::string cpu = Submit(Spec(1));
  EXPECT_EQ(Job(cpu).state(), v1::Job::SCHEDULED);
  EXPECT_THAT(AssignedGpus(g1, cpu), IsEmpty());
  EXPECT_FALSE(StoredJob(cpu).placement().ranks(0).has_gpu());
  EXPECT_THAT(manager_->Workers()[0].free_gpus(), ElementsAre(0, 1));
  // It holds a slot, so one of the two GPUs can take a rank now.
  const std::string cuda = Submit(CudaSpec(2, 1));
  EXPECT_EQ(Job(cuda).state(), v1::Job::PENDING);
  EXPECT_THAT(Job(cuda).pending_reason(), HasSubstr("free GPUs: g1=2 (2 GPUs, 0 held, 1 free slots)"));
}

TEST_F(GpuJobsTest, AnUnhealthyGpuFailsTheAttemptOnItAndTheRestartUsesOtherGpus) {
  Conn g1 = ConnectGpu(GpuReg("g1", 4));
  const std::string id = Submit(CudaSpec(2, 1, /*max_restarts=*/1));
  EXPECT_THAT(AssignedGpus(g1, id), ElementsAre("0:0:GPU-g1-0", "1:1:GPU-g1-1"));
  Report(g1, id, 1, {0, 1}, v1::RankState::RUNNING);
  ASSERT_EQ(Job(id).state(), v1::Job::RUNNING);

  // A GPU nobody uses going bad touches no job.
  manager_->Heartbeat(g1.id, Beat({Sample(0), Sample(1), Broken(3, "critical XID 79 (GPU fell off the bus)")}));
  EXPECT_EQ(Job(id).state(), v1::Job::RUNNING);

  manager_->Heartbeat(g1.id, Beat({Sample(0), Broken(1, "uncorrectable ECC errors: 1"), Sample(2)}));
  v1::Job failed = Job(id);
  EXPECT_EQ(failed.state(), v1::Job::RESTARTING);
  ASSERT_EQ(failed.failure_causes_size(), 1);
  EXPECT_EQ(failed.failure_causes(0),
            "GPU 1 (GPU-g1-1) of worker g1 unhealthy: uncorrectable ECC errors: 1 (rank 1 ran on it)");
  ASSERT_FALSE(g1.channel->Of(v1::ControllerMessage::kCancel).empty());

  // The ranks end; attempt 2 is placed on healthy GPUs only (1 and 3 are out).
  Report(g1, id, 1, {0, 1}, v1::RankState::KILLED, "cancelled");
  ASSERT_EQ(Job(id).attempt(), 2);
  EXPECT_EQ(Job(id).state(), v1::Job::SCHEDULED);
  EXPECT_THAT(AssignedGpus(g1, id), ElementsAre("0:0:GPU-g1-0", "1:2:GPU-g1-2"));
  EXPECT_THAT(manager_->Workers()[0].unhealthy_gpus(), ElementsAre(1, 3));

  // It used the one restart: the next GPU failure fails the job.
  Report(g1, id, 2, {0, 1}, v1::RankState::RUNNING);
  manager_->Heartbeat(g1.id, Beat({Broken(2, "uncorrectable ECC errors: 3", 3)}));
  EXPECT_EQ(Job(id).state(), v1::Job::FAILED);
  EXPECT_THAT(Job(id).failure_reason(), HasSubstr("GPU 2 (GPU-g1-2) of worker g1 unhealthy"));
}

TEST_F(GpuJobsTest, GpuSeriesFollowHeartbeatsAndGoWithALostWorker) {
  Conn g1 = ConnectGpu(GpuReg("g1", 2));
  EXPECT_EQ(Gauge("trainyard_worker_gpu_memory_total_bytes", "g1", 1), static_cast<double>(int64_t{140} << 30));
  EXPECT_EQ(Gauge("trainyard_worker_gpu_healthy", "g1", 0), 1.0);
  EXPECT_FALSE(Gauge("trainyard_worker_gpu_utilization_ratio", "g1", 0).has_value()) << "no sample yet";
  v1::GpuSample s = Sample(0);
  s.set_xid_errors(2);
  manager_->Heartbeat(g1.id, Beat({s, Broken(1, "uncorrectable ECC errors: 4", 4)}));
  EXPECT_EQ(Gauge("trainyard_worker_gpu_utilization_ratio", "g1", 0), 0.5);
  EXPECT_EQ(Gauge("trainyard_worker_gpu_memory_used_bytes", "g1", 0), static_cast<double>(int64_t{10} << 30));
  EXPECT_EQ(Gauge("trainyard_worker_gpu_power_watts", "g1", 0), 300.0);
  EXPECT_EQ(Gauge("trainyard_worker_gpu_temperature_celsius", "g1", 0), 60.0);
  EXPECT_EQ(Gauge("trainyard_worker_gpu_xid_errors", "g1", 0), 2.0);
  EXPECT_EQ(Gauge("trainyard_worker_gpu_ecc_uncorrected_errors", "g1", 1), 4.0);
  EXPECT_EQ(Gauge("trainyard_worker_gpu_healthy", "g1", 1), 0.0);
  EXPECT_EQ(Gauge("trainyard_worker_gpu_healthy", "g1", 0), 1.0);
  // A value the worker cannot read (-1) has no series.
  v1::GpuSample blind = Sample(0);
  blind.set_power_watts(-1);
  manager_->Heartbeat(g1.id, Beat({blind}));
  EXPECT_FALSE(Gauge("trainyard_worker_gpu_power_watts", "g1", 0).has_value());

  clock_.Advance(absl::Seconds(20));  // past the 15 s heartbeat timeout
  manager_->Tick();
  EXPECT_TRUE(manager_->Workers().empty());
  for (const char* family : {"trainyard_worker_gpu_utilization_ratio", "trainyard_worker_gpu_memory_total_bytes",
                             "trainyard_worker_gpu_healthy", "trainyard_worker_gpu_ecc_uncorrected_errors"}) {
    EXPECT_FALSE(Gauge(family, "g1", 0).has_value()) << family;
    EXPECT_FALSE(Gauge(family, "g1", 1).has_value()) << family;
  }
}

TEST_F(GpuJobsTest, RecoveryRestoresGpuHoldsFromTheStoredPlacement) {
  Conn g1 = ConnectGpu(GpuReg("g1", 4));
  const std::string id = Submit(CudaSpec(2, 1));
  Report(g1, id, 1, {0, 1}, v1::RankState::RUNNING);
  ASSERT_EQ(Job(id).state(), v1::Job::RUNNING);

  Restart();
  v1::Register again = GpuReg("g1", 4);
  v1::RunningAttempt* running = again.add_running();
  running->set_job_id(id);
  running->set_attempt(1);
  running->add_ranks(0);
  running->add_ranks(1);
  Conn back = ConnectGpu(again);
  EXPECT_EQ(Job(id).state(), v1::Job::RUNNING);
  EXPECT_THAT(manager_->Workers()[0].free_gpus(), ElementsAre(2, 3));
  const std::string next = Submit(CudaSpec(2, 1));
  EXPECT_THAT(AssignedGpus(back, next), ElementsAre("0:2:GPU-g1-2", "1:3:GPU-g1-3"));
  // The recovered ranks end: their GPUs are free again.
  Report(back, id, 1, {0, 1}, v1::RankState::EXITED);
  EXPECT_THAT(manager_->Workers()[0].free_gpus(), ElementsAre(0, 1));
}

TEST_F(GpuJobsTest, AdmissionRefusesWhatNoConnectedWorkerCanRun) {
  Connect("c1", 2);
  auto cuda = manager_->Submit(CudaSpec(1, 1), "alice");
  EXPECT_EQ(cuda.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(cuda.status().message()),
              HasSubstr("the one connected worker does not have both (c1: libtorch unknown, cuda=false, 0 GPUs)"));
  ConnectGpu(GpuReg("g1", 2));
  v1::JobSpec graph = CudaSpec(1, 1);
  graph.mutable_compile()->set_backend("cudagraph");
  auto refused = manager_->Submit(graph, "alice");
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(refused.status().message()),
              HasSubstr("compile.backend=cudagraph needs a worker whose engine has the cudagraph capability; none of "
                        "the 2 connected workers has it (c1: libtorch unknown, cuda=false, cudagraph=false; g1: "
                        "libtorch 2.5.1, cuda=true, cudagraph=false)"));
  EXPECT_TRUE(manager_->Submit(CudaSpec(2, 1), "alice").ok());
}

}  // namespace
}  // namespace trainyard::testing
