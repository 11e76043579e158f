// The worker's GPU flags: --gpus with and without NVML (the fake one), --nccl-env and
// --slots against the offered GPUs.
#include "worker/daemon/worker_gpus.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/worker/gpu/fake_nvml_config.h"

namespace trainyard {
namespace {

using ::testing::HasSubstr;
using testing::FakeNvmlConfig;

TEST(SetUpGpusTest, OffersTheSelectedGpusOfTheFake) {
  FakeNvmlConfig config("count 8\nnvlink 0-3 4-7\n");
  absl::StatusOr<WorkerGpus> gpus = SetUpGpus("1,2,5", TRAINYARD_FAKE_NVML);
  ASSERT_TRUE(gpus.ok()) << gpus.status();
  ASSERT_NE(gpus->nvml, nullptr);
  EXPECT_EQ(gpus->inventory.gpus.size(), 8u);
  ASSERT_EQ(gpus->offered.size(), 3u);
  EXPECT_EQ(gpus->offered[0].index(), 1);
  EXPECT_EQ(gpus->offered[0].nvlink_domain(), 1);
  EXPECT_EQ(gpus->offered[1].nvlink_domain(), 1);
  EXPECT_EQ(gpus->offered[2].nvlink_domain(), 0);  // 5's domain peers are not offered
}

TEST(SetUpGpusTest, MissingNvmlWithAllIsACpuWorker) {
  absl::StatusOr<WorkerGpus> gpus = SetUpGpus("all", "/nonexistent/libnvidia-ml.so.1");
  ASSERT_TRUE(gpus.ok()) << gpus.status();
  EXPECT_TRUE(gpus->offered.empty());
  EXPECT_EQ(gpus->nvml, nullptr);
  ASSERT_EQ(gpus->notes.size(), 1u);
  EXPECT_THAT(gpus->notes[0], HasSubstr("NVML not found (dlopen /nonexistent/libnvidia-ml.so.1: "));
  EXPECT_THAT(gpus->notes[0], HasSubstr("running as a CPU worker"));
}

TEST(SetUpGpusTest, MissingNvmlWithAListIsAnError) {
  absl::StatusOr<WorkerGpus> gpus = SetUpGpus("0,1", "/nonexistent/libnvidia-ml.so.1");
  ASSERT_FALSE(gpus.ok());
  EXPECT_THAT(gpus.status().message(), HasSubstr("--gpus '0,1': NVML not found"));
}

TEST(SetUpGpusTest, NoneNeverLoadsNvml) {
  absl::StatusOr<WorkerGpus> gpus = SetUpGpus("none", "/nonexistent/libnvidia-ml.so.1");
  ASSERT_TRUE(gpus.ok()) << gpus.status();
  EXPECT_TRUE(gpus->offered.empty());
}

TEST(SetUpGpusTest, BrokenNvmlIsAnErrorEvenWithAll) {
  FakeNvmlConfig config("count 2\nfail init\n");
  absl::StatusOr<WorkerGpus> gpus = SetUpGpus("all", TRAINYARD_FAKE_NVML);
  ASSERT_FALSE(gpus.ok());
  EXPECT_THAT(gpus.status().message(), HasSubstr("nvmlInit_v2: Driver Not Loaded (NVML error 9)"));
  EXPECT_THAT(gpus.status().message(), HasSubstr("--gpus none runs this worker without GPUs"));
  config.Write("count 2\nfail uuid\n");
  gpus = SetUpGpus("all", TRAINYARD_FAKE_NVML);
  ASSERT_FALSE(gpus.ok());
  EXPECT_THAT(gpus.status().message(), HasSubstr("nvmlDeviceGetUUID(GPU 0): Unknown Error (NVML error 999)"));
}

TEST(SetUpGpusTest, ZeroGpusIsACpuWorker) {
  FakeNvmlConfig config("count 0\n");
  absl::StatusOr<WorkerGpus> gpus = SetUpGpus("all", TRAINYARD_FAKE_NVML);
  ASSERT_TRUE(gpus.ok()) << gpus.status();
  EXPECT_TRUE(gpus->offered.empty());
  EXPECT_EQ(gpus->nvml, nullptr);
}

TEST(NcclEnvTest, AcceptsNcclAndTorchNcclNames) {
  EXPECT_EQ(*ParseNcclEnvSetting("NCCL_SOCKET_IFNAME=eth0"), std::make_pair(std::string("NCCL_SOCKET_IFNAME"), std::string("eth0")));
  EXPECT_EQ(*ParseNcclEnvSetting("TORCH_NCCL_ASYNC_ERROR_HANDLING=1"),
            std::make_pair(std::string("TORCH_NCCL_ASYNC_ERROR_HANDLING"), std::string("1")));
  EXPECT_EQ(ParseNcclEnvSetting("NCCL_IB_HCA=mlx5_0:1,mlx5_1:1=x")->second, "mlx5_0:1,mlx5_1:1=x");
  EXPECT_EQ(ParseNcclEnvSetting("NCCL_DEBUG=")->second, "");
}

TEST(NcclEnvTest, RefusesOtherNamesAndHostileValues) {
  for (const char *bad : {"LD_PRELOAD=/tmp/x.so", "NCCL_=1", "nccl_debug=INFO", "NCCL_DEBUG", "=1",
                          "TORCH_NCCL=1", "NCCL-DEBUG=1", "CUDA_VISIBLE_DEVICES=0"}) {
    absl::StatusOr<std::pair<std::string, std::string>> r = ParseNcclEnvSetting(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_THAT(r.status().message(), HasSubstr("expected NAME=VALUE with NAME matching (TORCH_)?NCCL_[A-Z0-9_]+"))
        << bad;
  }
  absl::StatusOr<std::pair<std::string, std::string>> r = ParseNcclEnvSetting("NCCL_DEBUG=INFO\nX=1");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("has a control or non-ASCII byte"));
  r = ParseNcclEnvSetting("NCCL_DEBUG=" + std::string(1014, 'a'));  // 1025 bytes in all
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("NAME=VALUE is longer than 1024 bytes"));
}

TEST(ResolveSlotsTest, GpusSetTheDefaultAndTheCeiling) {
  EXPECT_EQ(*ResolveSlots(std::nullopt, 8), 8);
  EXPECT_EQ(*ResolveSlots(3, 8), 3);
  EXPECT_EQ(*ResolveSlots(8, 8), 8);
  absl::StatusOr<int> over = ResolveSlots(9, 8);
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.status().message(), "--slots 9 exceeds the 8 GPU(s) this worker offers (one rank per GPU)");
  EXPECT_EQ(*ResolveSlots(16, 0), 16);
  absl::StatusOr<int> none = ResolveSlots(std::nullopt, 0);
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().message(), "--slots is required on a worker that offers no GPUs");
}

}  // namespace
}  // namespace trainyard
