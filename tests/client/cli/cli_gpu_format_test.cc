// What the CLI shows of GPU workers and of a job's GPU placement (client/cli/gpu_format.h),
// against hand-written text; and `trainyard workers` / `get` through the fake
// JobService: the JSON carries every WorkerInfo field, get shows each rank's GPU.
#include "client/cli/gpu_format.h"

#include <gmock/gmock.h>
#include <google/protobuf/util/message_differencer.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/time/time.h"
#include "client/cli/cli_format.h"
#include "common/events/proto_json.h"
#include "tests/client/cli/cli_test_fixture.h"

namespace trainyard {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kH200Bytes = 143771LL << 20;  // NVML's total for an H200: 140.4 GiB

// g1: 8 H200s, GPU 3 out of service (XID 79), GPU 5 just reported an ECC error (not yet
// taken out by the controller), 0-2, 4 and 6 free.
v1::WorkerInfo GpuWorker() {
  v1::WorkerInfo w;
  w.set_name("g1");
  w.set_slots(8);
  w.set_free_slots(6);
  w.set_connected(true);
  w.set_address("10.0.0.7:7071");
  w.set_device("cuda");
  w.set_memory_bytes(int64_t{2} << 40);
  for (int i = 0; i < 8; ++i) {
    v1::GpuDevice* g = w.add_gpus();
    g->set_index(i);
    g->set_uuid("GPU-0000000" + std::to_string(i));
    g->set_name("NVIDIA H200");
    g->set_memory_bytes(kH200Bytes);
    g->set_nvlink_domain(1);
    v1::GpuSample* s = w.add_gpu_samples();
    s->set_index(i);
    s->set_utilization(0.5);
    s->set_memory_used_bytes(int64_t{1} << 30);
    s->set_healthy(true);
  }
  w.mutable_gpu_samples(3)->set_healthy(false);
  w.mutable_gpu_samples(3)->set_xid_errors(1);
  w.mutable_gpu_samples(3)->set_last_xid(79);
  w.mutable_gpu_samples(3)->set_unhealthy_reason("XID 79 (GPU fell off the bus)");
  w.mutable_gpu_samples(5)->set_healthy(false);
  w.mutable_gpu_samples(5)->set_ecc_uncorrected(2);
  w.mutable_gpu_samples(5)->set_unhealthy_reason("uncorrectable ECC error");
  for (int i : {6, 0, 1, 2, 4}) w.add_free_gpus(i);
  w.add_unhealthy_gpus(3);
  v1::EngineCapabilities* c = w.mutable_capabilities();
  c->set_libtorch_version("2.4.0");
  c->set_cuda(true);
  c->set_cuda_version("12.4");
  c->set_nccl(true);
  c->set_bf16(true);
  c->set_cudagraph(true);
  w.set_gpu_driver_version("550.54.15");
  w.set_cuda_driver_version("12.4");
  w.set_nvlink_topology_known(true);
  w.add_nccl_env("NCCL_SOCKET_IFNAME=eth0");
  return w;
}

v1::WorkerInfo CpuWorker() {
  v1::WorkerInfo w;
  w.set_name("c1");
  w.set_slots(4);
  w.set_free_slots(4);
  w.set_connected(false);
  w.set_address("10.0.0.5:7071");
  w.set_device("cpu");
  w.mutable_capabilities()->set_libtorch_version("1.13.0");
  w.mutable_capabilities()->set_bf16(true);
  return w;
}

TEST(GpuFormatTest, WorkersTableWithGpuAndCpuWorkers) {
  EXPECT_EQ(cli::FormatWorkersTable({GpuWorker(), CpuWorker()}),
            "NAME  SLOTS  FREE  CONNECTED  ADDRESS        DEVICE  CAPABILITIES                   GPUS                 "
            "   FREE-GPUS    UNHEALTHY\n"
            "g1    8      6     yes        10.0.0.7:7071  cuda    cuda=12.4,nccl,bf16,cudagraph  8× NVIDIA H200 140 GiB"
            "  5 (0-2,4,6)  3: XID 79 (GPU fell off the bus); 5: uncorrectable ECC error\n"
            "c1    4      4     no         10.0.0.5:7071  cpu     cpu,bf16                       -                    "
            "   -            -\n");
  // A CPU-only fleet keeps its lines short: no GPU columns.
  EXPECT_EQ(cli::FormatWorkersTable({CpuWorker()}),
            "NAME  SLOTS  FREE  CONNECTED  ADDRESS        DEVICE  CAPABILITIES\n"
            "c1    4      4     no         10.0.0.5:7071  cpu     cpu,bf16\n");
}

TEST(GpuFormatTest, ModelsMemoryIndicesAndCapabilities) {
  v1::WorkerInfo w;
  EXPECT_EQ(cli::FormatGpuModels(w), "-");
  EXPECT_EQ(cli::FormatFreeGpus(w), "-");
  EXPECT_EQ(cli::FormatUnhealthyGpus(w), "-");
  EXPECT_EQ(cli::FormatCapabilities(w), "-");
  // Mixed models, listed in index order whatever order they came in.
  auto add = [&](int index, const char* name, int64_t bytes) {
    v1::GpuDevice* g = w.add_gpus();
    g->set_index(index);
    g->set_name(name);
    g->set_memory_bytes(bytes);
  };
  add(2, "NVIDIA T4", 15360LL << 20);  // 15.0 GiB
  add(0, "NVIDIA A100-SXM4-80GB", 81920LL << 20);
  add(1, "NVIDIA A100-SXM4-80GB", 81920LL << 20);
  add(3, "", 0);  // NVML gave neither
  EXPECT_EQ(cli::FormatGpuModels(w), "2× NVIDIA A100-SXM4-80GB 80 GiB, 1× NVIDIA T4 15 GiB, 1× GPU");
  EXPECT_EQ(cli::FormatFreeGpus(w), "0");
  EXPECT_EQ(cli::FormatGpuMemory(512LL << 20), "512.0 MiB");
  EXPECT_EQ(cli::FormatGpuMemory((int64_t{1} << 30) + (int64_t{1} << 29)), "2 GiB");  // 1.5 rounds up
  EXPECT_EQ(cli::FormatGpuMemory(0), "");
  EXPECT_EQ(cli::FormatIndexList({7, 0, 1, 2, 4, 6, 2}), "0-2,4,6,7");
  EXPECT_EQ(cli::FormatIndexList({5}), "5");
  EXPECT_EQ(cli::FormatIndexList({}), "");
  EXPECT_EQ(cli::FormatIndexList({3, 4, 5, 6, 9, 10}), "3-6,9,10");
  // A CUDA build without its version string, nothing else.
  w.mutable_capabilities()->set_cuda(true);
  EXPECT_EQ(cli::FormatCapabilities(w), "cuda");
  // An unhealthy GPU the samples have no reason for is shown by index alone.
  w.add_unhealthy_gpus(2);
  EXPECT_EQ(cli::FormatUnhealthyGpus(w), "2");
}

v1::Placement GpuPlacement() {
  v1::Placement p;
  for (int r = 0; r < 3; ++r) {
    v1::Placement::Rank* rank = p.add_ranks();
    rank->set_rank(r);
    rank->set_worker(r < 2 ? "g1" : "g2");
    rank->set_gpu(r < 2 ? r + 4 : 0);
    rank->set_gpu_uuid("GPU-aaaa-" + std::to_string(r));
  }
  p.set_master_addr("10.0.0.7");
  p.set_master_port(29500);
  v1::Placement::WorkerEnv* e = p.add_worker_env();
  e->set_worker("g1");
  e->add_nccl_env("NCCL_SOCKET_IFNAME=eth0");
  e->add_nccl_env("NCCL_IB_DISABLE=1");
  p.add_worker_env()->set_worker("g2");
  return p;
}

TEST(GpuFormatTest, PlacementShowsEachRanksGpuAndEachWorkersNcclSettings) {
  EXPECT_EQ(cli::FormatPlacementGpus(GpuPlacement(), "gpus  ", "nccl  "),
            "gpus  rank 0: g1 gpu 4 GPU-aaaa-0\n"
            "      rank 1: g1 gpu 5 GPU-aaaa-1\n"
            "      rank 2: g2 gpu 0 GPU-aaaa-2\n"
            "nccl  g1: NCCL_SOCKET_IFNAME=eth0 NCCL_IB_DISABLE=1\n"
            "      g2: none\n");
  // A CPU job: nothing (gpu unset on every rank, no worker_env).
  v1::Placement cpu;
  cpu.add_ranks()->set_worker("c1");
  EXPECT_EQ(cli::FormatPlacementGpus(cpu, "gpus  ", "nccl  "), "");
  // GPU index 0 is a GPU (the field's presence says so, not its value).
  v1::Placement one;
  one.add_ranks()->set_worker("g1");
  one.mutable_ranks(0)->set_gpu(0);
  one.add_ranks()->set_worker("c1");
  one.mutable_ranks(1)->set_rank(1);
  EXPECT_EQ(cli::FormatPlacementGpus(one, "g: ", "n: "), "g: rank 0: g1 gpu 0\n   rank 1: c1 (no GPU)\n");
}

TEST(GpuFormatTest, ExplainShowsGpusOfARunningJobAndFreeGpusOfThePendingOnesFleet) {
  v1::Job job;
  job.set_id("job-4");
  job.set_state(v1::Job::RUNNING);
  job.set_attempt(1);
  job.set_world_size(3);
  job.mutable_spec()->mutable_parallelism()->set_dp(3);
  job.mutable_spec()->mutable_parallelism()->set_tp(1);
  *job.mutable_placement() = GpuPlacement();
  EXPECT_EQ(cli::FormatExplain(job, {}, {}, absl::UnixEpoch()),
            "job-4  RUNNING  priority 0  world 3 (dp 3 × tp 1)\n"
            "placed:     attempt 1 on g1×2, g2×1\n"
            "gpus:       rank 0: g1 gpu 4 GPU-aaaa-0\n"
            "            rank 1: g1 gpu 5 GPU-aaaa-1\n"
            "            rank 2: g2 gpu 0 GPU-aaaa-2\n"
            "nccl env:   g1: NCCL_SOCKET_IFNAME=eth0 NCCL_IB_DISABLE=1\n"
            "            g2: none\n");
  job.set_state(v1::Job::PENDING);
  job.clear_placement();
  job.set_pending_reason("needs 3 GPUs");
  v1::WorkerInfo cpu = CpuWorker();
  cpu.set_connected(true);
  EXPECT_THAT(cli::FormatExplain(job, {job}, {GpuWorker(), cpu}, absl::UnixEpoch()),
              HasSubstr("fleet free: g1 6/8 (GPUs 5/8), c1 4/4\n"));
}

class CliGpuCommandsTest : public testing::CliTest {
 protected:
  int Run(std::vector<std::string> args) {
    args.push_back("--controller");
    args.push_back(address_);
    return RunRaw(args);
  }
};

TEST_F(CliGpuCommandsTest, WorkersJsonCarriesEveryGpuFieldAndTheTableShowsThem) {
  const v1::WorkerInfo gpu = GpuWorker();
  service_.AddWorker(gpu);
  service_.AddWorker(CpuWorker());
  ASSERT_EQ(Run({"workers", "--output", "json"}), 0) << err_.str();
  const std::vector<std::string> lines = OutLines();
  ASSERT_EQ(lines.size(), 2u) << out_.str();
  v1::WorkerInfo back;
  ASSERT_TRUE(FromJson(lines[0], &back).ok()) << lines[0];
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(back, gpu)) << lines[0];
  // By their .proto names, as docs/cli.md says.
  for (const char* key : {"\"gpus\"", "\"gpu_samples\"", "\"free_gpus\"", "\"unhealthy_gpus\"", "\"capabilities\"",
                          "\"gpu_driver_version\"", "\"cuda_driver_version\"", "\"nvlink_topology_known\"",
                          "\"nccl_env\"", "\"unhealthy_reason\"", "\"nvlink_domain\""}) {
    EXPECT_THAT(lines[0], HasSubstr(key));
  }

  ASSERT_EQ(Run({"workers"}), 0) << err_.str();
  EXPECT_THAT(out_.str(), HasSubstr("8× NVIDIA H200 140 GiB  5 (0-2,4,6)  3: XID 79 (GPU fell off the bus)"));
}

TEST_F(CliGpuCommandsTest, GetShowsEachRanksGpuAndTheWorkersNcclSettings) {
  v1::Job job = service_.AddJob("jg", v1::Job::RUNNING);
  *job.mutable_placement() = GpuPlacement();
  service_.PutJob(job);
  ASSERT_EQ(Run({"get", "jg"}), 0) << err_.str();
  EXPECT_THAT(out_.str(), HasSubstr("workers    rank 0@g1, rank 1@g1, rank 2@g2  (rendezvous 10.0.0.7:29500)\n"
                                    "gpus       rank 0: g1 gpu 4 GPU-aaaa-0\n"
                                    "           rank 1: g1 gpu 5 GPU-aaaa-1\n"
                                    "           rank 2: g2 gpu 0 GPU-aaaa-2\n"
                                    "nccl env   g1: NCCL_SOCKET_IFNAME=eth0 NCCL_IB_DISABLE=1\n"
                                    "           g2: none\n"));
  ASSERT_EQ(Run({"get", "jg", "--output", "json"}), 0) << err_.str();
  v1::Job back;
  ASSERT_TRUE(FromJson(OutLines().at(0), &back).ok());
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(back.placement(), GpuPlacement()));
}

}  // namespace
}  // namespace trainyard
