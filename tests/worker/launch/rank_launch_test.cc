// The rank launch policy (worker/launch/rank_launch.h) that the worker daemon and
// trainyard-train share: the thread environment, the argv, and what a spawned rank
// process sees.
#include "worker/launch/rank_launch.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <map>

#include "common/base/line_reader.h"
#include "common/base/posix_process_launcher.h"

namespace trainyard {
namespace {

using Env = std::vector<std::pair<std::string, std::string>>;

EnvLookup FromMap(std::map<std::string, std::string> env) {
  return [env](const std::string &name) -> std::optional<std::string> {
    auto it = env.find(name);
    if (it == env.end()) return std::nullopt;
    return it->second;
  };
}

TEST(RankLaunchTest, PassiveWaitingOnlyWhenAsked) {
  const auto none = FromMap({{"PATH", "/bin"}});
  EXPECT_EQ(RankThreadEnv(6, /*passive_wait=*/true, none),
            (Env{{"OMP_NUM_THREADS", "6"}, {"OPENBLAS_NUM_THREADS", "6"}, {"OMP_WAIT_POLICY", "PASSIVE"}}));
  EXPECT_EQ(RankThreadEnv(2, /*passive_wait=*/false, none),
            (Env{{"OMP_NUM_THREADS", "2"}, {"OPENBLAS_NUM_THREADS", "2"}}));
}

TEST(RankLaunchTest, KeepsWhatTheParentAlreadySetEvenWhenEmpty) {
  EXPECT_EQ(RankThreadEnv(6, true, FromMap({{"OMP_NUM_THREADS", "2"}, {"OMP_WAIT_POLICY", ""}})),
            (Env{{"OPENBLAS_NUM_THREADS", "6"}}));
  EXPECT_TRUE(RankThreadEnv(1, true,
                            FromMap({{"OMP_NUM_THREADS", "8"}, {"OPENBLAS_NUM_THREADS", "8"},
                                     {"OMP_WAIT_POLICY", "ACTIVE"}}))
                  .empty());
}

TEST(RankLaunchTest, DefaultThreadsSplitsCoresOverRanksAndIsAtLeastOne) {
  EXPECT_EQ(DefaultRankThreads(16, 4), 4);
  EXPECT_EQ(DefaultRankThreads(7, 2), 3);
  EXPECT_EQ(DefaultRankThreads(2, 4), 1);
  EXPECT_EQ(DefaultRankThreads(0, 1), 1);
  EXPECT_GE(OnlineCores(), 1);
}

// CPU steps (fused kernels or not) run LibTorch's MKL on their own OpenMP threads, which
// passive waiting slows down; only CUDA ranks' host threads idle.
TEST(RankLaunchTest, OnlyCudaRanksWaitPassively) {
  EXPECT_FALSE(PassiveThreadWait("cpu"));
  EXPECT_TRUE(PassiveThreadWait("cuda"));
}

TEST(RankLaunchTest, ArgvIsTheSameForEveryLauncher) {
  RankProcess p;
  p.rank_binary = "/bin/trainyard-rank";
  p.config_path = "/w/job/1/config.json";
  p.rank = 3;
  p.local_rank = 1;
  p.world_size = 4;
  p.master_addr = "10.0.0.1";
  p.master_port = 29500;
  p.attempt = 2;
  p.threads = 5;
  p.run_dir = "/w/job/2";
  p.resume_path = "/ck/job/step-00000010-attempt-1";
  p.extra_args = {"--load", "/init.safetensors"};
  p.env = {{"OMP_NUM_THREADS", "5"}};
  const LaunchRequest r = RankLaunchRequest(p);
  EXPECT_EQ(r.binary, "/bin/trainyard-rank");
  EXPECT_EQ(r.args, (std::vector<std::string>{"--config", "/w/job/1/config.json", "--rank", "3", "--world-size", "4",
                                              "--master-addr", "10.0.0.1", "--master-port", "29500", "--gloo-host",
                                              "10.0.0.1", "--attempt", "2", "--threads", "5", "--run-dir", "/w/job/2",
                                              "--local-rank", "1", "--resume", "/ck/job/step-00000010-attempt-1",
                                              "--load", "/init.safetensors"}));
  EXPECT_EQ(r.env, (Env{{"OMP_NUM_THREADS", "5"}}));
  // With the number of the gang's ranks on this machine: torchrun's LOCAL_* names last.
  p.local_world_size = 3;
  EXPECT_EQ(RankLaunchRequest(p).env,
            (Env{{"OMP_NUM_THREADS", "5"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "3"}}));
}

// What a spawned rank sees: the request's variables on top of the launcher's own
// environment, which stays as it was (the worker no longer exports them into itself).
TEST(RankLaunchTest, SpawnedProcessesSeeTheirEnvironmentAndTheParentIsUntouched) {
  ::setenv("TRAINYARD_TEST_PARENT_ONLY", "kept", 1);
  ::unsetenv("OPENBLAS_NUM_THREADS");
  std::string seen;
  {
    PosixProcessLauncher launcher;
    LaunchRequest request{"/bin/sh",
                          {"-c", "echo \"$OMP_NUM_THREADS $OPENBLAS_NUM_THREADS $TRAINYARD_TEST_PARENT_ONLY\""},
                          {{"OMP_NUM_THREADS", "4"}, {"OPENBLAS_NUM_THREADS", "1"}, {"OPENBLAS_NUM_THREADS", "3"}}};
    auto child = launcher.Launch(request);
    ASSERT_TRUE(child.ok()) << child.status();
    close(child->stderr_fd);
    ReadLines(child->stdout_fd, [&](std::string line) { seen += line; });
    const ProcessExit exit = launcher.Wait(child->pid);
    EXPECT_EQ(exit.exit_code, 0);
    EXPECT_GT(exit.peak_rss_mb, 0);
  }
  EXPECT_EQ(seen, "4 3 kept");  // a name given twice takes the later value
  EXPECT_EQ(::getenv("OPENBLAS_NUM_THREADS"), nullptr);
  ::unsetenv("TRAINYARD_TEST_PARENT_ONLY");
}

}  // namespace
}  // namespace trainyard
