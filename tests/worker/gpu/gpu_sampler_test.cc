// The sampler against the fake NVML: readings and their units, and the health
// transitions (ECC, critical XID, lost GPU) as the test rewrites the fake's config.
#include "worker/gpu/gpu_sampler.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/fakes/fake_clock.h"
#include "tests/worker/gpu/fake_nvml_config.h"
#include "worker/gpu/gpu_inventory.h"

namespace trainyard {
namespace {

using ::testing::HasSubstr;
using testing::FakeNvmlConfig;
using testing::OpenFakeNvml;

constexpr char kBase[] = "count 4\nnvlink all\n";

struct Fixture {
  explicit Fixture(const std::string &config) : config(config) {
    nvml = OpenFakeNvml();
    if (nvml == nullptr) return;
    absl::StatusOr<GpuInventory> inv = DiscoverGpus(*nvml);
    EXPECT_TRUE(inv.ok()) << inv.status();
    if (inv.ok()) gpus = inv->gpus;
  }
  FakeNvmlConfig config;
  std::unique_ptr<NvmlLibrary> nvml;
  std::vector<v1::GpuDevice> gpus;
  trainyard::testing::FakeClock clock;
};

TEST(GpuSamplerTest, ReadingsInTheirUnits) {
  Fixture f(std::string(kBase) +
            "util 1 0.75\nmem_used_mib 1 2048\npower_mw 1 312500\ntemp 1 41\necc_corrected 1 3\n");
  ASSERT_NE(f.nvml, nullptr);
  GpuSampler sampler(f.nvml.get(), f.gpus, {}, &f.clock);
  EXPECT_TRUE(sampler.Latest().empty());
  sampler.SampleOnce();
  std::vector<v1::GpuSample> s = sampler.Latest();
  ASSERT_EQ(s.size(), 4u);
  EXPECT_EQ(s[1].index(), 1);
  EXPECT_DOUBLE_EQ(s[1].utilization(), 0.75);
  EXPECT_EQ(s[1].memory_used_bytes(), 2048LL << 20);
  EXPECT_DOUBLE_EQ(s[1].power_watts(), 312.5);
  EXPECT_DOUBLE_EQ(s[1].temperature_celsius(), 41);
  EXPECT_EQ(s[1].ecc_corrected(), 3);
  EXPECT_EQ(s[1].ecc_uncorrected(), 0);
  EXPECT_EQ(s[1].xid_errors(), 0);
  EXPECT_EQ(s[1].last_xid(), 0);
  EXPECT_TRUE(s[1].healthy());
  EXPECT_EQ(s[1].unhealthy_reason(), "");
}

TEST(GpuSamplerTest, UnsupportedReadingsAreMinusOne) {
  Fixture f(std::string(kBase) + "unsupported power\nunsupported util\nunsupported temp\nunsupported ecc\n"
                                 "unsupported events\n");
  ASSERT_NE(f.nvml, nullptr);
  GpuSampler sampler(f.nvml.get(), f.gpus, {}, &f.clock);
  sampler.SampleOnce();
  const v1::GpuSample s = sampler.Latest().at(0);
  EXPECT_EQ(s.utilization(), -1);
  EXPECT_EQ(s.power_watts(), -1);
  EXPECT_EQ(s.temperature_celsius(), -1);
  EXPECT_EQ(s.ecc_uncorrected(), -1);
  EXPECT_EQ(s.ecc_corrected(), -1);
  EXPECT_EQ(s.xid_errors(), -1);
  EXPECT_EQ(s.memory_used_bytes(), 0);
  EXPECT_TRUE(s.healthy());
}

TEST(GpuSamplerTest, UncorrectableEccMarksTheGpuUnhealthyForGood) {
  Fixture f(kBase);
  ASSERT_NE(f.nvml, nullptr);
  GpuSampler sampler(f.nvml.get(), f.gpus, {}, &f.clock);
  sampler.SampleOnce();
  EXPECT_TRUE(sampler.Latest()[3].healthy());
  f.config.Write(std::string(kBase) + "ecc 3 2\n");
  sampler.SampleOnce();
  std::vector<v1::GpuSample> s = sampler.Latest();
  EXPECT_FALSE(s[3].healthy());
  EXPECT_EQ(s[3].ecc_uncorrected(), 2);
  EXPECT_EQ(s[3].unhealthy_reason(), "uncorrectable ECC errors: 2");
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(s[i].healthy()) << i;
  // Sticky: the counter going back (a driver reload) does not make it healthy.
  f.config.Write(kBase);
  sampler.SampleOnce();
  EXPECT_FALSE(sampler.Latest()[3].healthy());
}

TEST(GpuSamplerTest, CriticalXidCountsAndMarksUnhealthyOtherXidsDoNot) {
  Fixture f(kBase);
  ASSERT_NE(f.nvml, nullptr);
  GpuSampler sampler(f.nvml.get(), f.gpus, {}, &f.clock);
  f.config.Write(std::string(kBase) + "xid 2 13\nxid 1 31\n");  // application faults
  sampler.SampleOnce();
  std::vector<v1::GpuSample> s = sampler.Latest();
  EXPECT_TRUE(s[2].healthy());
  EXPECT_EQ(s[2].xid_errors(), 0);
  f.config.Write(std::string(kBase) + "xid 2 13\nxid 1 31\nxid 2 79\n");
  sampler.SampleOnce();
  s = sampler.Latest();
  EXPECT_FALSE(s[2].healthy());
  EXPECT_EQ(s[2].xid_errors(), 1);
  EXPECT_EQ(s[2].last_xid(), 79);
  EXPECT_EQ(s[2].unhealthy_reason(), "critical XID 79 (GPU has fallen off the bus)");
  EXPECT_TRUE(s[1].healthy());
  // Each event is delivered once; a second line is a second event.
  sampler.SampleOnce();
  EXPECT_EQ(sampler.Latest()[2].xid_errors(), 1);
  f.config.Write(std::string(kBase) + "xid 2 13\nxid 1 31\nxid 2 79\nxid 2 48\n");
  sampler.SampleOnce();
  s = sampler.Latest();
  EXPECT_EQ(s[2].xid_errors(), 2);
  EXPECT_EQ(s[2].last_xid(), 48);
  EXPECT_EQ(s[2].unhealthy_reason(), "critical XID 79 (GPU has fallen off the bus)");  // the first
}

TEST(GpuSamplerTest, LostGpuIsUnhealthyWithTheCall) {
  Fixture f(std::string(kBase) + "mem_used_mib 0 10\n");
  ASSERT_NE(f.nvml, nullptr);
  GpuSampler sampler(f.nvml.get(), f.gpus, {}, &f.clock);
  sampler.SampleOnce();
  f.config.Write(std::string(kBase) + "lost 0\n");
  sampler.SampleOnce();
  const v1::GpuSample s = sampler.Latest()[0];
  EXPECT_FALSE(s.healthy());
  EXPECT_EQ(s.unhealthy_reason(),
            "GPU is lost: nvmlDeviceGetMemoryInfo(GPU 0): GPU is lost (NVML error 15)");
  EXPECT_EQ(s.memory_used_bytes(), -1);
  EXPECT_EQ(s.utilization(), -1);
  EXPECT_TRUE(sampler.Latest()[1].healthy());
}

TEST(GpuSamplerTest, CriticalXidList) {
  for (int xid : {48, 64, 74, 79, 94, 95}) EXPECT_TRUE(GpuSampler::IsCriticalXid(xid)) << xid;
  for (int xid : {0, 13, 31, 43, 45, 63, 92, 999}) EXPECT_FALSE(GpuSampler::IsCriticalXid(xid)) << xid;
}

TEST(GpuSamplerTest, ThreadSamplesAtTheIntervalOnTheClock) {
  Fixture f(kBase);
  ASSERT_NE(f.nvml, nullptr);
  GpuSampler sampler(f.nvml.get(), f.gpus, {.interval = absl::Seconds(5)}, &f.clock);
  sampler.Start();  // one sample before it returns
  ASSERT_EQ(sampler.Latest().size(), 4u);
  EXPECT_TRUE(sampler.Latest()[1].healthy());
  f.config.Write(std::string(kBase) + "ecc 1 1\n");
  // Moves the fake time until the thread has sampled again (bounded real-time wait).
  bool seen = false;
  for (int i = 0; i < 2000 && !seen; ++i) {
    f.clock.Advance(absl::Seconds(5));
    absl::SleepFor(absl::Milliseconds(5));
    seen = !sampler.Latest()[1].healthy();
  }
  EXPECT_TRUE(seen);
  sampler.Stop();
}

}  // namespace
}  // namespace trainyard
