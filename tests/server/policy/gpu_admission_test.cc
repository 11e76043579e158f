// Admission against GPU workers (the engine's capabilities, GPUs, GPU memory) and the
// checks of a worker's Register that describe its GPUs.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "server/policy/admission_policy.h"
#include "server/policy/device_validation.h"
#include "server/policy/request_validation.h"

namespace trainyard {
namespace {

using ::testing::HasSubstr;

v1::JobSpec Tiny(const std::string& device) {
  v1::JobSpec spec;
  spec.mutable_model()->set_preset("tiny");
  spec.mutable_parallelism()->set_dp(1);
  spec.mutable_parallelism()->set_tp(1);
  spec.mutable_resources()->set_device(device);
  return spec;
}

FleetWorker CpuWorker(const std::string& name) {
  FleetWorker w;
  w.name = name;
  w.libtorch_version = "1.13.0";
  return w;
}

FleetWorker GpuWorker(const std::string& name, int64_t gpu_memory, bool cudagraph = false, bool bf16 = false) {
  FleetWorker w = CpuWorker(name);
  w.libtorch_version = "2.5.1";
  w.cuda = true;
  w.cudagraph = cudagraph;
  w.bf16 = bf16;
  w.gpus = 1;
  w.largest_gpu_memory_bytes = gpu_memory;
  w.largest_gpu_index = 0;
  w.largest_gpu_name = "NVIDIA H200";
  return w;
}

FleetView Fleet(std::vector<FleetWorker> workers) {
  FleetView fleet;
  fleet.connected_slots = 8;
  fleet.workers = std::move(workers);
  return fleet;
}

TEST(GpuAdmissionTest, CudaNeedsAWorkerWithGpusAndACudaEngine) {
  auto none = AdmissionPolicy::Admit(Tiny("cuda"), Fleet({CpuWorker("w1"), CpuWorker("w2")}));
  EXPECT_EQ(none.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(none.status().message(),
            "resources.device=cuda needs a worker that offers GPUs and whose engine has the cuda capability; none of "
            "the 2 connected workers has both (w1: libtorch 1.13.0, cuda=false, 0 GPUs; w2: libtorch 1.13.0, "
            "cuda=false, 0 GPUs)");
  auto empty = AdmissionPolicy::Admit(Tiny("cuda"), Fleet({}));
  EXPECT_EQ(empty.status().message(),
            "resources.device=cuda needs a worker that offers GPUs and whose engine has the cuda capability; no "
            "worker is connected");
  auto ok = AdmissionPolicy::Admit(Tiny("cuda"), Fleet({CpuWorker("w1"), GpuWorker("g1", int64_t{1} << 40)}));
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->resources().device(), "cuda");
}

TEST(GpuAdmissionTest, CudagraphNeedsTheCapabilityNamingTheWorkersConsidered) {
  v1::JobSpec graph = Tiny("cuda");
  graph.mutable_compile()->set_backend("cudagraph");
  auto refused = AdmissionPolicy::Admit(graph, Fleet({CpuWorker("w1"), GpuWorker("g1", 0)}));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(refused.status().message(),
            "compile.backend=cudagraph needs a worker whose engine has the cudagraph capability; none of the 2 "
            "connected workers has it (w1: libtorch 1.13.0, cuda=false, cudagraph=false; g1: libtorch 2.5.1, "
            "cuda=true, cudagraph=false)");
  EXPECT_TRUE(AdmissionPolicy::Admit(graph, Fleet({GpuWorker("g1", 0, true)})).ok());
}

TEST(GpuAdmissionTest, Bf16NeedsTheCapabilityOnAnyDevice) {
  v1::JobSpec bf16 = Tiny("cpu");
  bf16.mutable_training()->set_mixed_precision("bf16");
  auto refused = AdmissionPolicy::Admit(bf16, Fleet({CpuWorker("w1")}));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(refused.status().message(),
            "training.mixed_precision=bf16 needs a worker whose engine has the bf16 capability; the one "
            "connected worker does not have it (w1: libtorch 1.13.0, cuda=false, bf16=false)");
  FleetWorker cpu_bf16 = CpuWorker("w1");
  cpu_bf16.bf16 = true;
  EXPECT_TRUE(AdmissionPolicy::Admit(bf16, Fleet({cpu_bf16})).ok());
}

TEST(GpuAdmissionTest, ACudaJobMustFitTheLargestEligibleGpu) {
  // 1 MiB of GPU memory cannot hold even the tiny preset's AdamW state.
  auto refused = AdmissionPolicy::Admit(Tiny("cuda"), Fleet({GpuWorker("g1", 1 << 20)}));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(refused.status().message()),
              HasSubstr("more than the largest GPU of the eligible workers has (g1 GPU 0, NVIDIA H200: 1 MiB)"));
  // The host memory of a CPU worker does not count for a CUDA job...
  FleetView fleet = Fleet({GpuWorker("g1", 1 << 20)});
  fleet.largest_memory_worker = "big";
  fleet.largest_memory_bytes = int64_t{1} << 40;
  EXPECT_FALSE(AdmissionPolicy::Admit(Tiny("cuda"), fleet).ok());
  // ...nor does a large GPU of a worker whose engine cannot run the job.
  FleetWorker no_engine = GpuWorker("g0", int64_t{1} << 40);
  no_engine.cuda = false;
  EXPECT_FALSE(AdmissionPolicy::Admit(Tiny("cuda"), Fleet({no_engine, GpuWorker("g1", 1 << 20)})).ok());
  EXPECT_TRUE(AdmissionPolicy::Admit(Tiny("cuda"), Fleet({GpuWorker("g1", int64_t{80} << 30)})).ok());
}

TEST(GpuAdmissionTest, ACudaJobTooLargeForTheIdleGpuFleetWaitsForever) {
  FleetView fleet = Fleet({GpuWorker("g1", 0)});
  WorkerSnapshot idle{"g1", 2};
  idle.engine_cuda = true;
  idle.gpus = {{0, 0, true, false}, {1, 0, true, false}};
  fleet.idle_workers = {idle};
  v1::JobSpec four = Tiny("cuda");
  four.mutable_parallelism()->set_dp(4);
  auto refused = AdmissionPolicy::Admit(four, fleet);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(refused.status().message()),
              HasSubstr("cannot be placed even with every connected worker idle (needs 4 GPUs; free GPUs: g1=2 (2 "
                        "GPUs, 0 held)), so it would wait forever"));
}

v1::Register GpuRegister(int gpus) {
  v1::Register r;
  r.set_name("g1");
  r.set_address("g1.local:7000");
  r.set_device("cuda");
  r.set_slots(gpus);
  for (int i = 0; i < gpus; ++i) {
    auto* g = r.add_gpus();
    g->set_index(i);
    g->set_uuid("GPU-" + std::to_string(i));
    g->set_name("NVIDIA H200");
    g->set_memory_bytes(int64_t{140} << 30);
  }
  r.add_nccl_env("NCCL_IB_DISABLE=1");
  r.add_nccl_env("TORCH_NCCL_ASYNC_ERROR_HANDLING=1");
  return r;
}

std::string Problem(const v1::Register& r) { return std::string(request_validation::Check(r).message()); }

TEST(RegisterDevicesTest, HostileGpuListsAreRefusedNamingTheField) {
  ASSERT_TRUE(request_validation::Check(GpuRegister(2)).ok()) << Problem(GpuRegister(2));
  v1::Register many = GpuRegister(1025);
  many.set_slots(1);
  EXPECT_EQ(Problem(many), "Register.gpus: lists 1025 GPUs, more than the 1024 allowed");
  v1::Register dup = GpuRegister(2);
  dup.mutable_gpus(1)->set_index(0);
  EXPECT_EQ(Problem(dup), "Register.gpus.index: lists GPU 0 twice");
  v1::Register same_uuid = GpuRegister(2);
  same_uuid.mutable_gpus(1)->set_uuid("GPU-0");
  EXPECT_EQ(Problem(same_uuid), "Register.gpus.uuid: lists GPU-0 twice");
  v1::Register no_uuid = GpuRegister(1);
  no_uuid.mutable_gpus(0)->set_uuid("");
  EXPECT_EQ(Problem(no_uuid), "Register.gpus.uuid: of GPU 0 is empty");
  v1::Register bad_utf8 = GpuRegister(1);
  bad_utf8.mutable_gpus(0)->set_name("H\xff");
  EXPECT_EQ(Problem(bad_utf8), "Register.gpus.name: of GPU 0 is not UTF-8: H\\xff");
  v1::Register negative = GpuRegister(1);
  negative.mutable_gpus(0)->set_memory_bytes(-5);
  EXPECT_EQ(Problem(negative), "Register.gpus.memory_bytes: of GPU 0 must be >= 0, got -5");
  v1::Register index = GpuRegister(1);
  index.mutable_gpus(0)->set_index(-1);
  EXPECT_EQ(Problem(index), "Register.gpus.index: must be in [0, 1024), got -1");
  v1::Register slots = GpuRegister(2);
  slots.set_slots(3);
  EXPECT_EQ(Problem(slots), "Register.slots: is 3, more than the 2 GPUs this cuda worker offers (one rank per GPU)");
  v1::Register cpu = GpuRegister(1);
  cpu.set_device("cpu");
  EXPECT_EQ(Problem(cpu), "Register.device: must be \"cuda\" for a worker that offers GPUs, got cpu");
  v1::Register empty = GpuRegister(0);
  empty.set_slots(1);
  EXPECT_EQ(Problem(empty), "Register.gpus: is empty, but Register.device is \"cuda\"");
}

TEST(RegisterDevicesTest, NcclEnvMustBeNcclSettings) {
  EXPECT_EQ(request_validation::NcclEnvProblem("NCCL_SOCKET_IFNAME=eth0"), "");
  EXPECT_EQ(request_validation::NcclEnvProblem("NCCL_DEBUG="), "");
  EXPECT_EQ(request_validation::NcclEnvProblem("NCCL_DEBUG"), "is not NAME=VALUE: NCCL_DEBUG");
  EXPECT_EQ(request_validation::NcclEnvProblem("LD_PRELOAD=/x.so"),
            "names LD_PRELOAD, not an NCCL setting (the name must match (TORCH_)?NCCL_[A-Z0-9_]+)");
  EXPECT_EQ(request_validation::NcclEnvProblem("NCCL_=1"),
            "names NCCL_, not an NCCL setting (the name must match (TORCH_)?NCCL_[A-Z0-9_]+)");
  EXPECT_EQ(request_validation::NcclEnvProblem("nccl_debug=INFO"),
            "names nccl_debug, not an NCCL setting (the name must match (TORCH_)?NCCL_[A-Z0-9_]+)");
  EXPECT_EQ(request_validation::NcclEnvProblem("NCCL_DEBUG=a\nb"), "has a value that is not printable ASCII: NCCL_DEBUG=a\\x0ab");
  v1::Register many = GpuRegister(1);
  for (int i = 0; i < 64; ++i) many.add_nccl_env("NCCL_X=1");
  EXPECT_EQ(Problem(many), "Register.nccl_env: lists 66 settings, more than the 64 allowed");
  v1::Register bad = GpuRegister(1);
  bad.add_nccl_env("PATH=/tmp");
  EXPECT_EQ(Problem(bad), "Register.nccl_env: names PATH, not an NCCL setting (the name must match "
                          "(TORCH_)?NCCL_[A-Z0-9_]+)");
  v1::Register version = GpuRegister(1);
  version.set_gpu_driver_version(std::string(200, '5'));
  EXPECT_THAT(Problem(version), HasSubstr("Register.gpu_driver_version: is 200 bytes, more than the 128 allowed"));
}

}  // namespace
}  // namespace trainyard
