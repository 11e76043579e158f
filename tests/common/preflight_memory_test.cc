// What this machine can give a preflight runner (MemAvailable, the memory cgroup), and
// whether a runner fits it: the figures, the cap, and the refusal with what to do.
#include "common/preflight_memory.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "common/spec/memory_estimate.h"
#include "common/spec/presets.h"
#include "tests/support/temp_dir.h"

namespace trainyard {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using testing::TempDir;

constexpr double kGiB = 1024.0 * 1024 * 1024;

void Write(const std::string& path, const std::string& text) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path) << text;
}

class HostMemoryTest : public ::testing::Test {
 protected:
  HostMemoryTest() {
    paths_.meminfo = dir_.path() + "/meminfo";
    paths_.self_cgroup = dir_.path() + "/self-cgroup";
    paths_.cgroup_root = dir_.path() + "/cgroup";
    Write(paths_.meminfo, "MemTotal:       24683772 kB\nMemFree:  1000 kB\nMemAvailable:   20971520 kB\n");
  }
  TempDir dir_;
  HostMemoryPaths paths_;
};

TEST_F(HostMemoryTest, MemAvailableWithoutACgroupLimit) {
  Write(paths_.self_cgroup, "0::/\n");  // no controllers file: not a v2 hierarchy here
  absl::StatusOr<HostMemory> m = ReadHostMemory(paths_);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->available_bytes, 20 * kGiB);
  EXPECT_EQ(m->source, "MemAvailable (" + paths_.meminfo + ")");
}

TEST_F(HostMemoryTest, ACgroupV2LimitBelowMemAvailableWinsAndAnAncestorCanBeTheTighter) {
  Write(paths_.self_cgroup, "0::/ctr/job\n");
  Write(paths_.cgroup_root + "/cgroup.controllers", "cpu memory\n");
  Write(paths_.cgroup_root + "/ctr/job/memory.max", "max\n");
  Write(paths_.cgroup_root + "/ctr/job/memory.current", "1073741824\n");
  Write(paths_.cgroup_root + "/ctr/memory.max", "8589934592\n");  // 8 GiB for the container
  Write(paths_.cgroup_root + "/ctr/memory.current", "2147483648\n");
  absl::StatusOr<HostMemory> m = ReadHostMemory(paths_);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->available_bytes, 6 * kGiB);
  EXPECT_THAT(m->source, HasSubstr("the memory cgroup /ctr's limit 8 GiB less the 2 GiB it uses"));
}

TEST_F(HostMemoryTest, ACgroupV1Limit) {
  Write(paths_.self_cgroup, "5:devices:/\n4:memory:/box\n0::/\n");
  Write(paths_.cgroup_root + "/memory/box/memory.limit_in_bytes", "4294967296\n");
  Write(paths_.cgroup_root + "/memory/box/memory.usage_in_bytes", "1073741824\n");
  Write(paths_.cgroup_root + "/memory/memory.limit_in_bytes", "9223372036854771712\n");  // v1's "none"
  Write(paths_.cgroup_root + "/memory/memory.usage_in_bytes", "5368709120\n");
  absl::StatusOr<HostMemory> m = ReadHostMemory(paths_);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->available_bytes, 3 * kGiB);
  // A limit above MemAvailable leaves MemAvailable the figure.
  Write(paths_.cgroup_root + "/memory/box/memory.limit_in_bytes", "68719476736\n");
  EXPECT_EQ(ReadHostMemory(paths_)->available_bytes, 20 * kGiB);
}

TEST_F(HostMemoryTest, NoMemAvailableIsAnError) {
  Write(paths_.meminfo, "MemTotal: 100 kB\n");
  EXPECT_EQ(ReadHostMemory(paths_).status().code(), absl::StatusCode::kUnavailable);
}

TEST(HostMemoryRealTest, ThisMachineHasSome) {
  absl::StatusOr<HostMemory> m = ReadHostMemory();
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_GT(m->available_bytes, 0);
}

spec::JobSpec Spec(const std::vector<std::string>& sets) {
  spec::Result<spec::JobSpec> s = spec::FromPreset("debug", sets);
  EXPECT_TRUE(s.ok()) << s.error().ToString();
  return s.value();
}

TEST(FitRunnerTest, ASmallRunnerFitsAndEachProcessIsCappedAtItsShare) {
  const HostMemory host{16 * kGiB, "test", 0};
  const PreflightFit fit = FitRunner(Spec({"parallelism.dp=2"}), host);
  EXPECT_TRUE(fit.fits);
  EXPECT_EQ(fit.world, 2);
  EXPECT_EQ(fit.rank_bytes, fit.rank_estimate + kRunnerRankOverheadBytes);
  EXPECT_EQ(fit.need_bytes, 2 * fit.rank_bytes + kRunnerLauncherBytes);
  // The two ranks at their cap and the launcher together stay within what the host gives.
  EXPECT_EQ(fit.data_limit_bytes, static_cast<int64_t>((16 * kGiB - kRunnerLauncherBytes) / 2));
  EXPECT_TRUE(fit.refusal.empty());
  // An inherited ulimit -d below the share is the cap.
  const PreflightFit bound = FitRunner(Spec({"parallelism.dp=2"}), HostMemory{16 * kGiB, "test", 2 * kGiB});
  EXPECT_TRUE(bound.fits);
  EXPECT_EQ(bound.data_limit_bytes, static_cast<int64_t>(2 * kGiB));
}

TEST(FitRunnerTest, TheIssuesModelIsRefusedWithTheFiguresShrinkAndALayout) {
  // The issue's job: the debug preset at dim 8192 and 48 layers, on a 23 GiB host.
  const spec::JobSpec big = Spec({"model.dim=8192", "model.n_layers=48"});
  const PreflightFit fit = FitRunner(big, HostMemory{19.8 * kGiB, "MemAvailable (/proc/meminfo)", 0});
  EXPECT_FALSE(fit.fits);
  EXPECT_GT(fit.rank_estimate, 100 * kGiB);
  EXPECT_THAT(fit.refusal, HasSubstr("the runner would need about " + spec::FormatBytes(fit.need_bytes) +
                                     " on this machine (1 rank of " + spec::FormatBytes(fit.rank_estimate) +
                                     " estimated at dp=1 "));
  EXPECT_THAT(fit.refusal, HasSubstr("more than the 19.8 GiB it can give (MemAvailable (/proc/meminfo))"));
  // One rank has no other layout: none fits, and --shrink is the way.
  EXPECT_FALSE(fit.layout_fits);
  const std::string message = DescribeRefusal(fit, "--shrink runs the same structure");
  EXPECT_THAT(message, HasSubstr("; no layout of dp·tp=1 ranks fits"));
  EXPECT_THAT(message, HasSubstr(" on this machine; --shrink runs the same structure"));
  EXPECT_THAT(DescribeRefusal(fit, ""), Not(HasSubstr("--shrink")));
}

TEST(FitRunnerTest, ALayoutThatFitsIsNamed) {
  // Four ranks of a model whose experts dominate: spreading them (ep=4) fits.
  const spec::JobSpec spec = Spec({"parallelism.dp=4", "model.n_routed_experts=64", "model.expert_hidden=1024"});
  const PreflightFit whole = FitRunner(spec, HostMemory{1e15, "test", 0});
  ASSERT_TRUE(whole.fits);
  spec::JobSpec ep4 = spec;
  ep4.parallelism.ep = 4;
  const double ep4_rank = spec::EstimateRankMemory(ep4).total_bytes() + kRunnerRankOverheadBytes;
  ASSERT_LT(ep4_rank, whole.rank_bytes);
  const double available = 4 * (ep4_rank + whole.rank_bytes) / 2 + kRunnerLauncherBytes;
  const PreflightFit fit = FitRunner(spec, HostMemory{available, "test", 0});
  EXPECT_FALSE(fit.fits);
  EXPECT_TRUE(fit.layout_fits) << fit.layout;
  EXPECT_THAT(DescribeRefusal(fit, "--shrink ..."), HasSubstr("; --shrink ...; or the job fits at "));
}

TEST(FitRunnerTest, AnInheritedUlimitTooSmallForARankIsNamed) {
  const PreflightFit fit = FitRunner(Spec({}), HostMemory{64 * kGiB, "test", 256.0 * (1 << 20)});
  EXPECT_FALSE(fit.fits);
  EXPECT_THAT(fit.refusal, HasSubstr("more than the 256 MiB RLIMIT_DATA (ulimit -d) this process runs under"));
}

}  // namespace
}  // namespace trainyard
