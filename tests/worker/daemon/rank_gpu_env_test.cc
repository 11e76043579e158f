// Each rank's environment on a GPU worker: CUDA_VISIBLE_DEVICES from Assign.gpus (or ""),
// LOCAL_RANK / LOCAL_WORLD_SIZE, the --nccl-env settings; and the Assigns that are
// refused (LaunchSpecBuilder), then the same through RankSupervisor with real processes.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <map>

#include "absl/strings/match.h"

#include "common/base/posix_process_launcher.h"
#include "worker/daemon/launch_spec.h"
#include "worker/daemon/rank_supervisor.h"
#include "tests/worker/daemon/test_util.h"

namespace trainyard {
namespace {

using ::testing::HasSubstr;
using testing::EventCollector;
using testing::HasState;
using testing::TempDir;

std::string Uuid(int i) { return "GPU-00000000-0000-0000-0000-00000000000" + std::to_string(i); }

std::vector<v1::GpuDevice> Gpus(int n) {
  std::vector<v1::GpuDevice> gpus;
  for (int i = 0; i < n; ++i) {
    v1::GpuDevice g;
    g.set_index(i);
    g.set_uuid(Uuid(i));
    gpus.push_back(g);
  }
  return gpus;
}

// Ranks `ranks` of a 4-rank job; cuda jobs give rank r GPU `gpu_of[r]`.
v1::Assign MakeAssign(const std::string &device, std::vector<int> ranks, std::map<int, int> gpu_of = {}) {
  v1::Assign a;
  a.set_job_id("job-g");
  a.set_attempt(1);
  a.set_world_size(4);
  for (int r : ranks) a.add_ranks(r);
  a.set_master_addr("127.0.0.1");
  a.set_master_port(29600);
  a.mutable_spec()->mutable_resources()->set_device(device);
  for (auto [rank, gpu] : gpu_of) {
    v1::Assign::RankGpu *g = a.add_gpus();
    g->set_rank(rank);
    g->set_index(gpu);
    g->set_uuid(Uuid(gpu));
  }
  return a;
}

LaunchSpecBuilder::Options MakeOptions(std::vector<v1::GpuDevice> gpus) {
  LaunchSpecBuilder::Options o;
  o.rank_binary = "/opt/ty/trainyard-rank";
  o.work_dir = "/srv/w";
  o.threads_per_rank = 2;
  o.parent_env = [](const std::string &) { return std::nullopt; };
  o.gpus = std::move(gpus);
  o.nccl_env = {{"NCCL_SOCKET_IFNAME", "eth0"}, {"TORCH_NCCL_BLOCKING_WAIT", "1"}};
  return o;
}

std::map<std::string, std::string> EnvOf(const LaunchRequest &r) {
  std::map<std::string, std::string> env;
  for (const auto &[name, value] : r.env) env[name] = value;  // later wins, as in the launcher
  return env;
}

TEST(RankGpuEnvTest, CudaRanksGetTheirGpuLocalRankAndNcclSettings) {
  LaunchSpecBuilder builder(MakeOptions(Gpus(8)));
  absl::StatusOr<AttemptLaunch> launch = builder.Build(MakeAssign("cuda", {3, 1}, {{1, 6}, {3, 2}}));
  ASSERT_TRUE(launch.ok()) << launch.status();
  ASSERT_EQ(launch->ranks.size(), 2u);
  std::map<std::string, std::string> e0 = EnvOf(launch->ranks[0].request), e1 = EnvOf(launch->ranks[1].request);
  EXPECT_EQ(e0["CUDA_VISIBLE_DEVICES"], Uuid(2));  // rank 3
  EXPECT_EQ(e1["CUDA_VISIBLE_DEVICES"], Uuid(6));  // rank 1
  EXPECT_EQ(e0["LOCAL_RANK"], "0");
  EXPECT_EQ(e1["LOCAL_RANK"], "1");
  EXPECT_EQ(e0["LOCAL_WORLD_SIZE"], "2");
  EXPECT_EQ(e1["LOCAL_WORLD_SIZE"], "2");
  EXPECT_EQ(e0["NCCL_SOCKET_IFNAME"], "eth0");
  EXPECT_EQ(e1["TORCH_NCCL_BLOCKING_WAIT"], "1");
  EXPECT_EQ(e0["OMP_NUM_THREADS"], "2");
  // --local-rank agrees with LOCAL_RANK.
  const std::vector<std::string> &args = launch->ranks[1].request.args;
  auto it = std::find(args.begin(), args.end(), "--local-rank");
  ASSERT_NE(it, args.end());
  EXPECT_EQ(*(it + 1), "1");
}

TEST(RankGpuEnvTest, CpuJobsOnAnyWorkerGetNoGpu) {
  for (int gpus : {8, 0}) {
    absl::StatusOr<AttemptLaunch> launch = LaunchSpecBuilder(MakeOptions(Gpus(gpus))).Build(MakeAssign("cpu", {0, 2, 1}));
    ASSERT_TRUE(launch.ok()) << launch.status();
    for (size_t i = 0; i < 3; ++i) {
      std::map<std::string, std::string> env = EnvOf(launch->ranks[i].request);
      ASSERT_TRUE(env.count("CUDA_VISIBLE_DEVICES")) << gpus;
      EXPECT_EQ(env["CUDA_VISIBLE_DEVICES"], "");
      EXPECT_EQ(env["LOCAL_RANK"], std::to_string(i));
      EXPECT_EQ(env["LOCAL_WORLD_SIZE"], "3");
    }
  }
}

TEST(RankGpuEnvTest, BadGpuAssignsAreRefused) {
  LaunchSpecBuilder builder(MakeOptions(Gpus(4)));
  auto refused = [&](const v1::Assign &a) {
    absl::StatusOr<AttemptLaunch> launch = builder.Build(a);
    EXPECT_FALSE(launch.ok());
    EXPECT_EQ(launch.status().code(), absl::StatusCode::kInvalidArgument);
    return std::string(launch.status().message());
  };
  EXPECT_EQ(refused(MakeAssign("cuda", {0, 1}, {{0, 0}})), "assign of a cuda job gives rank 1 no GPU");
  EXPECT_EQ(refused(MakeAssign("cuda", {0}, {{0, 7}})),
            "assign gives rank 0 GPU 7 '" + Uuid(7) + "', which this worker does not offer");
  v1::Assign wrong_uuid = MakeAssign("cuda", {0}, {{0, 1}});
  wrong_uuid.mutable_gpus(0)->set_uuid(Uuid(2));
  EXPECT_THAT(refused(wrong_uuid), HasSubstr("which this worker does not offer"));
  EXPECT_EQ(refused(MakeAssign("cuda", {0, 1}, {{0, 2}, {1, 2}})), "assign gives GPU 2 to ranks 0 and 1");
  EXPECT_EQ(refused(MakeAssign("cuda", {0}, {{0, 0}, {2, 1}})),
            "assign gives a GPU to rank 2, which it does not assign here");
  EXPECT_EQ(refused(MakeAssign("cpu", {0}, {{0, 0}})), "assign of a cpu job names 1 GPU(s); only cuda jobs get GPUs");
  EXPECT_EQ(LaunchSpecBuilder(MakeOptions({})).Build(MakeAssign("cuda", {0}, {{0, 0}})).status().message(),
            "assign of a cuda job to a worker that offers no GPUs");
}

// Real processes: each rank prints its environment; a refused Assign fails every rank
// with the message and launches nothing.
TEST(RankGpuEnvTest, SupervisorStartsRanksWithTheirGpusAndTheParentsValueDoesNotLeak) {
  TempDir dir;
  const std::string script = dir.WriteScript("rank.sh", R"(
echo "env cvd=[$CUDA_VISIBLE_DEVICES] local=$LOCAL_RANK/$LOCAL_WORLD_SIZE nccl=$NCCL_SOCKET_IFNAME"
)");
  setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3", 1);  // the worker's own; must not reach a rank
  PosixProcessLauncher launcher;
  EventCollector events;
  RankSupervisor::Options o;
  o.worker_name = "w1";
  o.rank_binary = script;
  o.work_dir = dir.path() + "/work";
  o.slots = 4;
  o.gpus = Gpus(4);
  o.nccl_env = {{"NCCL_SOCKET_IFNAME", "ib0"}};
  RealClock clock;
  {
    RankSupervisor supervisor(o, &launcher, &clock, [&](v1::Event e) { events.Add(std::move(e)); });
    ASSERT_TRUE(supervisor.Assign(MakeAssign("cuda", {0, 1}, {{0, 3}, {1, 0}})).ok());
    ASSERT_TRUE(events.WaitFor([](const std::vector<v1::Event> &ev) {
      return HasState(ev, 0, v1::RankState::EXITED) && HasState(ev, 1, v1::RankState::EXITED);
    }));
    absl::Status refused = supervisor.Assign(MakeAssign("cuda", {2}, {}));
    EXPECT_EQ(refused.message(), "assign of a cuda job gives rank 2 no GPU");
    EXPECT_TRUE(HasState(events.events(), 2, v1::RankState::FAILED));
  }
  unsetenv("CUDA_VISIBLE_DEVICES");
  std::map<int, std::string> lines;
  std::string failed;
  for (const v1::Event &e : events.events()) {
    if (e.has_log() && absl::StartsWith(e.log().message(), "env ")) lines[e.rank()] = e.log().message();
    if (e.rank() == 2 && e.has_rank_state()) failed = e.rank_state().message();
  }
  EXPECT_EQ(lines[0], "env cvd=[" + Uuid(3) + "] local=0/2 nccl=ib0");
  EXPECT_EQ(lines[1], "env cvd=[" + Uuid(0) + "] local=1/2 nccl=ib0");
  EXPECT_EQ(failed, "assign of a cuda job gives rank 2 no GPU");
}

}  // namespace
}  // namespace trainyard
