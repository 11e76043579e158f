#include "worker/daemon/rank_environment.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <map>

#include "common/line_reader.h"
#include "common/posix_process_launcher.h"

namespace trainyard {
namespace {

using Variable = RankEnvironment::Variable;

RankEnvironment::Lookup FromMap(std::map<std::string, std::string> env) {
  return [env](const std::string &name) -> std::optional<std::string> {
    auto it = env.find(name);
    if (it == env.end()) return std::nullopt;
    return it->second;
  };
}

TEST(RankEnvironmentTest, SetsEveryThreadVariableWhenTheParentSetsNone) {
  EXPECT_EQ(RankEnvironment::ThreadVariables(6, FromMap({{"PATH", "/bin"}})),
            (std::vector<Variable>{{"OMP_NUM_THREADS", "6"},
                                   {"OPENBLAS_NUM_THREADS", "6"},
                                   {"OMP_WAIT_POLICY", "PASSIVE"}}));
}

TEST(RankEnvironmentTest, KeepsWhatTheParentAlreadySetEvenWhenEmpty) {
  EXPECT_EQ(RankEnvironment::ThreadVariables(
                6, FromMap({{"OMP_NUM_THREADS", "2"}, {"OMP_WAIT_POLICY", ""}})),
            (std::vector<Variable>{{"OPENBLAS_NUM_THREADS", "6"}}));
  EXPECT_TRUE(RankEnvironment::ThreadVariables(
                  1, FromMap({{"OMP_NUM_THREADS", "8"},
                              {"OPENBLAS_NUM_THREADS", "8"},
                              {"OMP_WAIT_POLICY", "ACTIVE"}}))
                  .empty());
}

TEST(RankEnvironmentTest, DefaultThreadsSplitsCoresOverSlotsAndIsAtLeastOne) {
  EXPECT_EQ(RankEnvironment::DefaultThreads(16, 4), 4);
  EXPECT_EQ(RankEnvironment::DefaultThreads(7, 2), 3);
  EXPECT_EQ(RankEnvironment::DefaultThreads(2, 4), 1);
  EXPECT_EQ(RankEnvironment::DefaultThreads(0, 1), 1);  // hardware_concurrency unknown
}

// What a spawned rank sees: the worker exports the variables into its own
// environment and the launcher's children inherit it, the operator's value first.
TEST(RankEnvironmentTest, SpawnedProcessesInheritExportedVariablesAndParentValuesWin) {
  const char *names[] = {"OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "OMP_WAIT_POLICY"};
  std::map<std::string, std::optional<std::string>> saved;
  for (const char *name : names) {
    const char *v = getenv(name);
    saved[name] = v ? std::optional<std::string>(v) : std::nullopt;
    unsetenv(name);
  }
  setenv("OMP_NUM_THREADS", "5", 1);  // the operator's choice
  RankEnvironment::Export(
      RankEnvironment::ThreadVariables(3, RankEnvironment::ProcessEnvironment()));
  EXPECT_EQ(RankEnvironment::ProcessEnvironment()("OPENBLAS_NUM_THREADS"), "3");

  std::string seen;
  {
    PosixProcessLauncher launcher;
    auto child = launcher.Launch(
        {"/bin/sh", {"-c", "echo \"$OMP_NUM_THREADS $OPENBLAS_NUM_THREADS $OMP_WAIT_POLICY\""}});
    ASSERT_TRUE(child.ok()) << child.status();
    close(child->stderr_fd);
    ReadLines(child->stdout_fd, [&](std::string line) { seen += line; });
    EXPECT_EQ(launcher.Wait(child->pid).exit_code, 0);
  }
  EXPECT_EQ(seen, "5 3 PASSIVE");

  for (const auto &[name, value] : saved) {
    if (value) {
      setenv(name.c_str(), value->c_str(), 1);
    } else {
      unsetenv(name.c_str());
    }
  }
}

}  // namespace
}  // namespace trainyard
