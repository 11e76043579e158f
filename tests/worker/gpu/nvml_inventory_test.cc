// The NVML loader and GPU discovery against the fake NVML (a real dlopen of a
// libnvidia-ml.so.1), and the --gpus selection.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "tests/worker/gpu/fake_nvml_config.h"
#include "worker/gpu/gpu_inventory.h"
#include "worker/gpu/nvml_library.h"

namespace trainyard {
namespace {

using ::testing::HasSubstr;
using testing::FakeNvmlConfig;
using testing::OpenFakeNvml;

constexpr char kHgx[] =
    "count 8\nname NVIDIA H200\nmemory_mib 143771\ndriver 580.159.04\ncuda 13000\nnvlink all\n";

std::string Uuid(int i) {
  char text[64];
  std::snprintf(text, sizeof text, "GPU-00000000-0000-0000-0000-%012d", i);
  return text;
}

TEST(NvmlLibraryTest, MissingLibraryIsNotFoundAndSaysNoGpus) {
  absl::StatusOr<std::unique_ptr<NvmlLibrary>> lib = NvmlLibrary::Open("/nonexistent/libnvidia-ml.so.1");
  ASSERT_FALSE(lib.ok());
  EXPECT_EQ(lib.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(lib.status().message(), HasSubstr("NVML not found (dlopen /nonexistent/libnvidia-ml.so.1: "));
  EXPECT_THAT(lib.status().message(), HasSubstr("): no GPUs offered"));
}

TEST(NvmlLibraryTest, LibraryWithoutNvmlSymbolsIsRefusedNamingTheSymbol) {
  // libdl / libc is a real shared library without NVML's symbols.
  absl::StatusOr<std::unique_ptr<NvmlLibrary>> lib = NvmlLibrary::Open("libc.so.6");
  ASSERT_FALSE(lib.ok());
  EXPECT_EQ(lib.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(lib.status().message(), HasSubstr("NVML library libc.so.6 lacks the symbol nvmlInit_v2"));
}

TEST(NvmlLibraryTest, FailingInitIsAPreciseError) {
  FakeNvmlConfig config("count 2\nfail init\n");
  absl::StatusOr<std::unique_ptr<NvmlLibrary>> lib = NvmlLibrary::Open(TRAINYARD_FAKE_NVML);
  ASSERT_FALSE(lib.ok());
  EXPECT_EQ(lib.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(lib.status().message(), HasSubstr("nvmlInit_v2: Driver Not Loaded (NVML error 9)"));
}

TEST(GpuInventoryTest, DiscoversEightH200sOnOneNvlinkDomain) {
  FakeNvmlConfig config(kHgx);
  auto nvml = OpenFakeNvml();
  ASSERT_NE(nvml, nullptr);
  absl::StatusOr<GpuInventory> inv = DiscoverGpus(*nvml);
  ASSERT_TRUE(inv.ok()) << inv.status();
  EXPECT_EQ(inv->driver_version, "580.159.04");
  EXPECT_EQ(inv->cuda_driver_version, "13.0");
  EXPECT_TRUE(inv->nvlink_topology_known);
  EXPECT_TRUE(inv->unusable.empty());
  ASSERT_EQ(inv->gpus.size(), 8u);
  for (int i = 0; i < 8; ++i) {
    const v1::GpuDevice &g = inv->gpus[i];
    EXPECT_EQ(g.index(), i);
    EXPECT_EQ(g.uuid(), Uuid(i));
    EXPECT_EQ(g.name(), "NVIDIA H200");
    EXPECT_EQ(g.memory_bytes(), 143771LL * 1024 * 1024);
    EXPECT_EQ(g.nvlink_domain(), 1);
  }
}

TEST(GpuInventoryTest, NvlinkGroupsBecomeDomainsAndLoneGpusZero) {
  FakeNvmlConfig config("count 8\ncuda 12040\nnvlink 0-2 4-7\n");
  auto nvml = OpenFakeNvml();
  ASSERT_NE(nvml, nullptr);
  absl::StatusOr<GpuInventory> inv = DiscoverGpus(*nvml);
  ASSERT_TRUE(inv.ok()) << inv.status();
  EXPECT_EQ(inv->cuda_driver_version, "12.4");
  EXPECT_TRUE(inv->nvlink_topology_known);
  std::vector<int> domains;
  for (const auto &g : inv->gpus) domains.push_back(g.nvlink_domain());
  EXPECT_EQ(domains, (std::vector<int>{1, 1, 1, 0, 2, 2, 2, 2}));
}

TEST(GpuInventoryTest, UnknownTopologyLeavesEveryDomainZero) {
  FakeNvmlConfig config("count 4\nnvlink unknown\n");
  auto nvml = OpenFakeNvml();
  ASSERT_NE(nvml, nullptr);
  absl::StatusOr<GpuInventory> inv = DiscoverGpus(*nvml);
  ASSERT_TRUE(inv.ok()) << inv.status();
  EXPECT_FALSE(inv->nvlink_topology_known);
  for (const auto &g : inv->gpus) EXPECT_EQ(g.nvlink_domain(), 0);
}

TEST(GpuInventoryTest, FailingUuidCallIsAnErrorNamingCallAndGpu) {
  FakeNvmlConfig config("count 2\nfail uuid\n");
  auto nvml = OpenFakeNvml();
  ASSERT_NE(nvml, nullptr);
  absl::StatusOr<GpuInventory> inv = DiscoverGpus(*nvml);
  ASSERT_FALSE(inv.ok());
  EXPECT_EQ(inv.status().message(), "nvmlDeviceGetUUID(GPU 0): Unknown Error (NVML error 999)");
}

TEST(GpuInventoryTest, FailingCountIsAnError) {
  FakeNvmlConfig config("count 2\nfail count\n");
  auto nvml = OpenFakeNvml();
  ASSERT_NE(nvml, nullptr);
  absl::StatusOr<GpuInventory> inv = DiscoverGpus(*nvml);
  ASSERT_FALSE(inv.ok());
  EXPECT_EQ(inv.status().message(), "nvmlDeviceGetCount_v2: Unknown Error (NVML error 999)");
}

TEST(GpuInventoryTest, LostGpuAtDiscoveryIsUnusableNotOffered) {
  FakeNvmlConfig config("count 3\nlost 1\nnvlink all\n");
  auto nvml = OpenFakeNvml();
  ASSERT_NE(nvml, nullptr);
  absl::StatusOr<GpuInventory> inv = DiscoverGpus(*nvml);
  ASSERT_TRUE(inv.ok()) << inv.status();
  ASSERT_EQ(inv->gpus.size(), 2u);
  EXPECT_EQ(inv->gpus[0].index(), 0);
  EXPECT_EQ(inv->gpus[1].index(), 2);
  ASSERT_EQ(inv->unusable.size(), 1u);
  EXPECT_EQ(inv->unusable[0].first, 1);
  EXPECT_THAT(inv->unusable[0].second, HasSubstr("GPU is lost (NVML error 15)"));
  absl::StatusOr<std::vector<v1::GpuDevice>> chosen = ParseGpuSelection("1", *inv);
  ASSERT_FALSE(chosen.ok());
  EXPECT_THAT(chosen.status().message(), HasSubstr("GPU 1 is not usable"));
}

TEST(CudaVersionTextTest, MajorAndMinor) {
  EXPECT_EQ(CudaVersionText(13000), "13.0");
  EXPECT_EQ(CudaVersionText(12080), "12.8");
  EXPECT_EQ(CudaVersionText(11020), "11.2");
  EXPECT_EQ(CudaVersionText(0), "");
}

// An inventory of `n` GPUs written by hand: GPUs 0-3 on domain 1, 4-7 on domain 2.
GpuInventory HandInventory(int n) {
  GpuInventory inv;
  for (int i = 0; i < n; ++i) {
    v1::GpuDevice g;
    g.set_index(i);
    g.set_uuid(Uuid(i));
    g.set_nvlink_domain(i < 4 ? 1 : 2);
    inv.gpus.push_back(g);
  }
  inv.nvlink_topology_known = true;
  return inv;
}

std::vector<int> Indices(const std::vector<v1::GpuDevice> &gpus) {
  std::vector<int> out;
  for (const auto &g : gpus) out.push_back(g.index());
  return out;
}

TEST(GpuSelectionTest, AllNoneIndicesAndUuids) {
  const GpuInventory inv = HandInventory(8);
  EXPECT_EQ(Indices(*ParseGpuSelection("all", inv)), (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_TRUE(ParseGpuSelection("none", inv)->empty());
  EXPECT_EQ(Indices(*ParseGpuSelection("3,0,2", inv)), (std::vector<int>{0, 2, 3}));
  EXPECT_EQ(Indices(*ParseGpuSelection(" 5 , 6 ", inv)), (std::vector<int>{5, 6}));
  EXPECT_EQ(Indices(*ParseGpuSelection(Uuid(7) + "," + Uuid(1), inv)), (std::vector<int>{1, 7}));
}

TEST(GpuSelectionTest, DomainsAreRenumberedAmongOfferedGpus) {
  const GpuInventory inv = HandInventory(8);
  // 0 and 4 are alone in their domains once chosen; 5 and 6 share domain 2.
  std::vector<v1::GpuDevice> chosen = *ParseGpuSelection("0,4", inv);
  EXPECT_EQ(chosen[0].nvlink_domain(), 0);
  EXPECT_EQ(chosen[1].nvlink_domain(), 0);
  chosen = *ParseGpuSelection("0,5,6", inv);
  EXPECT_EQ(chosen[0].nvlink_domain(), 0);
  EXPECT_EQ(chosen[1].nvlink_domain(), 1);
  EXPECT_EQ(chosen[2].nvlink_domain(), 1);
}

TEST(GpuSelectionTest, HostileInputGetsPreciseErrors) {
  const GpuInventory inv = HandInventory(4);
  auto error = [&](const std::string &text) {
    absl::StatusOr<std::vector<v1::GpuDevice>> r = ParseGpuSelection(text, inv);
    EXPECT_FALSE(r.ok()) << text;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << text;
    return std::string(r.status().message());
  };
  EXPECT_THAT(error(""), HasSubstr("expected all, none, or a comma list"));
  EXPECT_THAT(error("0,,1"), HasSubstr("an empty item"));
  EXPECT_THAT(error("0,"), HasSubstr("an empty item"));
  EXPECT_THAT(error("4"), HasSubstr("no GPU with index 4 (this machine has 4)"));
  EXPECT_THAT(error("1,1"), HasSubstr("GPU 1 (" + Uuid(1) + ") is given twice"));
  EXPECT_THAT(error("1," + Uuid(1)), HasSubstr("mixes GPU indices and UUIDs"));
  EXPECT_THAT(error(Uuid(2) + ",2"), HasSubstr("mixes GPU indices and UUIDs"));
  EXPECT_THAT(error("GPU-ffffffff"), HasSubstr("no GPU with UUID GPU-ffffffff"));
  EXPECT_THAT(error("MIG-1234"), HasSubstr("MIG devices are not supported"));
  EXPECT_THAT(error("-1"), HasSubstr("'-1' is neither a GPU index nor a UUID"));
  EXPECT_THAT(error("1x"), HasSubstr("'1x' is not a GPU index"));
  EXPECT_THAT(error("99999999999999999999"), HasSubstr("is not a GPU index"));
  EXPECT_THAT(error("all,0"), HasSubstr("'all' must be given alone"));
  EXPECT_THAT(error("0\n1"), HasSubstr("contains a control or non-ASCII character"));
  EXPECT_THAT(error(std::string(5000, '1')), HasSubstr("longer than 4096 bytes"));
  // The text is quoted and cut, never echoed whole.
  EXPECT_LT(error(std::string(5000, '1')).size(), 300u);
}

}  // namespace
}  // namespace trainyard
