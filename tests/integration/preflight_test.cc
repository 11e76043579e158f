// The compile preflight end to end with the real controller, worker and CLI binaries on
// loopback. trainyard-train --preflight is stood in for by a shell script that answers
// by job name (canned Event lines and the contract's exit status), and the worker's
// ranks by a script that exits 0, so these tests do not depend on the engine.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/files.h"
#include "tests/support/ports.h"
#include "tests/support/temp_dir.h"
#include "tests/support/test_process.h"

namespace trainyard::testing {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

constexpr char kTensor[] = "layers.1.moe.tokens_per_expert";

std::vector<json> JsonLines(const std::string& text) {
  std::vector<json> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line[0] == '{') out.push_back(json::parse(line));
  }
  return out;
}

// The fake runner. It logs each call's argv, keeps the spec it was given, and picks
// its behaviour from the job name in that spec.
std::string FakeRunnerScript(const std::string& dir) {
  // --print-config (what it would run, before the run): the spec it was given.
  return "case \" $* \" in *\" --print-config \"*) cat \"$1\"; exit 0 ;; esac\n"
         "echo \"$@\" >> " +
         dir + "/runner-calls\n" + "cp \"$1\" " + dir + "/runner-spec.json\n" +
         "case \"$(cat \"$1\")\" in\n"
         "*'\"name\":\"pf-findings\"'*)\n"
         "  echo '{\"rank\":0,\"compile\":{\"kind\":\"COMPILE\",\"region\":\"moe_router\","
         "\"layers\":[1],\"compile_ms\":3.5}}'\n"
         "  echo '{\"rank\":0,\"compile\":{\"kind\":\"UNSAFE_SIDE_EFFECT\",\"region\":"
         "\"moe_router\",\"layers\":[1],\"reason\":\"" +
         kTensor +
         " was written inside the region (version 0 -> 1)\"}}'\n"
         "  exit 3 ;;\n"
         "*'\"name\":\"pf-crash\"'*)\n"
         "  echo 'rank 0: step 2: boom in moe_router' >&2\n"
         "  echo '{\"rank\":0,\"log\":{\"level\":\"error\",\"message\":\"step 2: boom\"}}'\n"
         "  exit 1 ;;\n"
         "*'\"name\":\"pf-hang\"'*)\n"
         "  sleep 600 &\n"
         "  echo $! > " +
         dir +
         "/hang-child.pid\n"
         "  wait ;;\n"
         "*)\n"
         "  echo '{\"rank\":0,\"compile\":{\"kind\":\"COMPILE\",\"region\":\"attention\","
         "\"layers\":[0,1],\"compile_ms\":9.0}}'\n"
         "  echo '{\"rank\":0,\"compile\":{\"kind\":\"GRAPH_BREAK\",\"region\":\"moe_dispatch\","
         "\"reason\":\"all-to-all of expert splits\"}}'\n"
         "  exit 0 ;;\n"
         "esac\n";
}

class PreflightIntegrationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    runner_ = dir_.WriteScript("trainyard-train", FakeRunnerScript(dir_.path()));
    if (preflight_binary_.empty()) preflight_binary_ = runner_;
    controller_ = std::make_unique<TestProcess>(
        std::vector<std::string>{TRAINYARD_CONTROLLER, "--listen", "127.0.0.1:0", "--data-dir", dir_.path() + "/data",
                                 "--port-file", dir_.path() + "/port", "--preflight-binary", preflight_binary_,
                                 "--preflight-timeout", preflight_timeout_},
        dir_.path() + "/controller.log");
    const std::string port = WaitForFile(dir_.path() + "/port", 20000);
    ASSERT_FALSE(port.empty()) << ReadFileOrEmpty(dir_.path() + "/controller.log");
    address_ = "127.0.0.1:" + std::to_string(std::stoi(port));
    const int base = RendezvousPortBase();
    worker_ = std::make_unique<TestProcess>(
        std::vector<std::string>{TRAINYARD_WORKER, "--controller", address_, "--slots", "2", "--name", "w1",
                                 "--rank-binary", dir_.WriteScript("rank.sh", "exit 0\n"), "--rendezvous-ports",
                                 std::to_string(base) + "-" + std::to_string(base + 9), "--work-dir",
                                 dir_.path() + "/worker"},
        dir_.path() + "/worker.log");
    for (int i = 0; i < 200; ++i) {
      auto r = Cli({"workers", "--output", "json"});
      if (r.exit_code == 0 && r.out.find("\"connected\":true") != std::string::npos) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    FAIL() << "worker never registered; see " << dir_.path() << "/worker.log";
  }

  void TearDown() override {
    worker_.reset();
    controller_.reset();
    if (HasFailure()) {
      std::printf("--- controller.log\n%s\n", ReadFileOrEmpty(dir_.path() + "/controller.log").c_str());
    }
  }

  CommandResult Cli(std::vector<std::string> args) {
    args.insert(args.begin(), TRAINYARD_CLI);
    args.push_back("--controller");
    args.push_back(address_);
    return RunCommand(args);
  }

  CommandResult SubmitWithPreflight(const std::string& name, std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {"submit", TRAINYARD_EXAMPLES "/tiny.toml", "--set",    "job.name=" + name,
                                     "--set",  "compile.preflight=true",        "--output", "json"};
    args.insert(args.end(), extra.begin(), extra.end());
    return Cli(args);
  }

  size_t JobCount() {
    auto r = Cli({"list", "--output", "json"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return JsonLines(r.out).size();
  }

  int RunnerCalls() {
    std::istringstream in(ReadFileOrEmpty(dir_.path() + "/runner-calls"));
    int n = 0;
    for (std::string line; std::getline(in, line);) ++n;
    return n;
  }

  TempDir dir_;
  std::string runner_;
  std::string preflight_binary_;  // set by a derived fixture to override the fake runner
  std::string preflight_timeout_ = "3";
  std::string address_;
  std::unique_ptr<TestProcess> controller_;
  std::unique_ptr<TestProcess> worker_;
};

TEST_F(PreflightIntegrationTest, FindingsRejectTheSubmitAndCreateNoJob) {
  const size_t before = JobCount();
  auto r = SubmitWithPreflight("pf-findings", {"--set", "compile.test_plant_side_effect=true"});
  EXPECT_EQ(r.exit_code, 6) << r.out;  // FAILED_PRECONDITION
  EXPECT_NE(r.err.find("FAILED_PRECONDITION"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("UNSAFE_SIDE_EFFECT region=moe_router"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(kTensor), std::string::npos) << r.err;
  EXPECT_TRUE(r.out.empty()) << "no job id may be printed: " << r.out;
  EXPECT_EQ(JobCount(), before) << "a job row was created despite the findings";

  // The runner got the contract's argv and the resolved spec, planted bug included.
  EXPECT_NE(ReadFileOrEmpty(dir_.path() + "/runner-calls").find(".json --preflight --json"), std::string::npos);
  json spec = json::parse(ReadFileOrEmpty(dir_.path() + "/runner-spec.json"));
  EXPECT_EQ(spec["compile"]["test_plant_side_effect"], true);
  EXPECT_EQ(spec["model"]["dim"], 64);  // the tiny preset was applied
}

TEST_F(PreflightIntegrationTest, CleanPreflightCreatesAndSchedulesTheJob) {
  auto r = SubmitWithPreflight("pf-clean", {"--wait"});
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;  // --wait: the job SUCCEEDED
  auto lines = JsonLines(r.out);
  ASSERT_FALSE(lines.empty());
  const std::string id = lines[0].at("id").get<std::string>();
  std::vector<std::string> states;
  for (size_t i = 1; i < lines.size(); ++i) {
    if (lines[i].contains("job_state")) states.push_back(lines[i]["job_state"]["state"]);
  }
  EXPECT_EQ(states, (std::vector<std::string>{"PENDING", "SCHEDULED", "RUNNING", "SUCCEEDED"}));
  EXPECT_EQ(RunnerCalls(), 1);
  auto get = Cli({"get", id, "--output", "json"});
  EXPECT_EQ(JsonLines(get.out).at(0).at("state"), "SUCCEEDED");
}

TEST_F(PreflightIntegrationTest, JobsWithoutPreflightNeverRunTheRunner) {
  auto r = Cli({"submit", TRAINYARD_EXAMPLES "/tiny.toml", "--wait"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(RunnerCalls(), 0);
}

TEST_F(PreflightIntegrationTest, InvalidSpecIsRefusedBeforeAnyPreflight) {
  auto r = SubmitWithPreflight("pf-clean", {"--set", "parallelism.tp=3"});
  EXPECT_EQ(r.exit_code, 2);  // INVALID_ARGUMENT
  EXPECT_NE(r.err.find("INVALID_ARGUMENT"), std::string::npos) << r.err;
  EXPECT_EQ(RunnerCalls(), 0);
}

TEST_F(PreflightIntegrationTest, RunnerFailureRejectsWithItsStderr) {
  const size_t before = JobCount();
  auto r = SubmitWithPreflight("pf-crash");
  EXPECT_EQ(r.exit_code, 6);  // FAILED_PRECONDITION
  EXPECT_NE(r.err.find("FAILED_PRECONDITION: preflight failed: runner exited with code 1: "
                       "rank 0: step 2: boom in moe_router"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(JobCount(), before);
}

TEST_F(PreflightIntegrationTest, TimeoutKillsTheRunnerAndRejects) {
  const size_t before = JobCount();
  auto r = SubmitWithPreflight("pf-hang");  // --preflight-timeout 3
  EXPECT_EQ(r.exit_code, 6);                // FAILED_PRECONDITION
  EXPECT_NE(r.err.find("preflight failed: timed out after"), std::string::npos) << r.err;
  EXPECT_EQ(JobCount(), before);
  const std::string pid = ReadFileOrEmpty(dir_.path() + "/hang-child.pid");
  ASSERT_FALSE(pid.empty());
  for (int i = 0; i < 100 && ProcessAlive(std::stoi(pid)); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_FALSE(ProcessAlive(std::stoi(pid))) << "the runner's process group survived the timeout";
}

class PreflightMissingBinaryTest : public PreflightIntegrationTest {
 protected:
  PreflightMissingBinaryTest() { preflight_binary_ = "/nonexistent/bin/trainyard-train"; }
};

TEST_F(PreflightMissingBinaryTest, SubmitFailsNamingTheBinaryAndOtherJobsStillRun) {
  auto r = SubmitWithPreflight("pf-clean");
  EXPECT_EQ(r.exit_code, 6);  // FAILED_PRECONDITION
  EXPECT_NE(r.err.find("FAILED_PRECONDITION"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("/nonexistent/bin/trainyard-train"), std::string::npos) << r.err;
  EXPECT_EQ(JobCount(), 0u);
  auto plain = Cli({"submit", TRAINYARD_EXAMPLES "/tiny.toml", "--wait"});
  EXPECT_EQ(plain.exit_code, 0) << plain.err;
}

// `trainyard preflight` needs no controller: it runs the runner itself.
class PreflightCliTest : public ::testing::Test {
 protected:
  CommandResult Preflight(std::vector<std::string> args) {
    args.insert(args.begin(), {TRAINYARD_CLI, "preflight"});
    args.push_back("--train-binary");
    args.push_back(runner_);
    return RunCommand(args);
  }
  TempDir dir_;
  const std::string runner_ = dir_.WriteScript("trainyard-train", FakeRunnerScript(dir_.path()));
};

TEST_F(PreflightCliTest, FindingsArePrintedAndExitOne) {
  auto r = Preflight({TRAINYARD_EXAMPLES "/tiny.toml", "--set", "job.name=pf-findings", "--set",
                      "compile.test_plant_side_effect=true", "--shrink"});
  EXPECT_EQ(r.exit_code, 1) << r.err;  // findings
  EXPECT_NE(r.out.find("rank 0  COMPILE  region=moe_router layers=[1] compile_ms=3.5\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(std::string("rank 0  UNSAFE_SIDE_EFFECT  region=moe_router layers=[1]  ") + kTensor),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("preflight: FINDINGS"), std::string::npos) << r.out;
  EXPECT_NE(ReadFileOrEmpty(dir_.path() + "/runner-calls").find(".json --preflight --shrink --json"),
            std::string::npos);
}

TEST_F(PreflightCliTest, JsonPrintsTheRunnersEventLinesOnly) {
  auto r = Preflight({TRAINYARD_EXAMPLES "/tiny.toml", "--set", "job.name=pf-findings", "--json"});
  EXPECT_EQ(r.exit_code, 1);  // findings
  auto lines = JsonLines(r.out);
  ASSERT_EQ(lines.size(), 2u) << r.out;
  EXPECT_EQ(lines[1]["compile"]["kind"], "UNSAFE_SIDE_EFFECT");
  EXPECT_EQ(r.out.find("preflight:"), std::string::npos) << "stdout must stay JSON Lines";
  EXPECT_NE(r.err.find("preflight: FINDINGS"), std::string::npos) << r.err;
}

TEST_F(PreflightCliTest, CleanRunShowsCompileEventsAndExitsZero) {
  auto r = Preflight({TRAINYARD_EXAMPLES "/tiny.toml"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("rank 0  GRAPH_BREAK  region=moe_dispatch  all-to-all of expert splits"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("preflight: clean (2 compile events"), std::string::npos) << r.out;
}

TEST_F(PreflightCliTest, RunnerFailureExitsSixAndSaysWhy) {
  auto r = Preflight({TRAINYARD_EXAMPLES "/tiny.toml", "--set", "job.name=pf-crash"});
  EXPECT_EQ(r.exit_code, 6);  // the runner failed
  EXPECT_NE(r.out.find("preflight: runner failure: runner exited with code 1: rank 0: step 2: "
                       "boom in moe_router"),
            std::string::npos)
      << r.out;
}

TEST_F(PreflightCliTest, TimeoutExitsSix) {
  auto r = Preflight({TRAINYARD_EXAMPLES "/tiny.toml", "--set", "job.name=pf-hang", "--timeout", "0.5"});
  EXPECT_EQ(r.exit_code, 6);
  EXPECT_NE(r.out.find("preflight: runner failure: timed out after"), std::string::npos) << r.out;
}

TEST_F(PreflightCliTest, BadInputExitsTwoWithoutRunningTheRunner) {
  auto bad_key = Preflight({TRAINYARD_EXAMPLES "/tiny.toml", "--set", "compile.backendd=jit"});
  EXPECT_EQ(bad_key.exit_code, 2);
  EXPECT_NE(bad_key.err.find("unknown key compile.backendd"), std::string::npos) << bad_key.err;
  auto invalid = Preflight({TRAINYARD_EXAMPLES "/tiny.toml", "--set", "compile.summary_every=0"});
  EXPECT_EQ(invalid.exit_code, 2);
  EXPECT_NE(invalid.err.find("compile.summary_every must be in [1, 1000000000], got 0"), std::string::npos)
      << invalid.err;
  // A rule across fields, reported with the --set it came from.
  auto cross = Preflight({TRAINYARD_EXAMPLES "/tiny.toml", "--set", "compile.backend=cudagraph"});
  EXPECT_EQ(cross.exit_code, 2);
  EXPECT_NE(cross.err.find("--set compile.backend=cudagraph: compile.backend=\"cudagraph\" needs "
                           "resources.device=\"cuda\""),
            std::string::npos)
      << cross.err;
  auto timeout = Preflight({TRAINYARD_EXAMPLES "/tiny.toml", "--set", "training.step_timeout_s=nan"});
  EXPECT_EQ(timeout.exit_code, 2);
  EXPECT_NE(timeout.err.find("training.step_timeout_s"), std::string::npos) << timeout.err;
  auto usage = RunCommand({TRAINYARD_CLI, "preflight", "--no-such-flag"});
  EXPECT_EQ(usage.exit_code, 2);
  EXPECT_FALSE(fs::exists(dir_.path() + "/runner-calls"));
}

TEST_F(PreflightCliTest, MissingRunnerIsARunnerFailure) {
  auto r = RunCommand(
      {TRAINYARD_CLI, "preflight", TRAINYARD_EXAMPLES "/tiny.toml", "--train-binary", dir_.path() + "/nope"});
  EXPECT_EQ(r.exit_code, 6);
  EXPECT_NE(r.out.find("cannot execute " + dir_.path() + "/nope"), std::string::npos) << r.out;
}

// The real runner: trainyard-train --preflight with real trainyard-rank processes. The
// planted side effect (compile.test_plant_side_effect) must be found by the engine's
// compile layer and the job refused before it takes a slot.
class PreflightRealRunnerTest : public PreflightIntegrationTest {
 protected:
  PreflightRealRunnerTest() {
    preflight_binary_ = TRAINYARD_TRAIN;
    preflight_timeout_ = "300";
  }
};

TEST_F(PreflightRealRunnerTest, PlantedSideEffectIsRejectedBeforeScheduling) {
  const size_t before = JobCount();
  auto r = SubmitWithPreflight("pf-real-planted",
                               {"--set", "compile.backend=jit", "--set", "compile.test_plant_side_effect=true"});
  EXPECT_EQ(r.exit_code, 6) << r.out;  // FAILED_PRECONDITION
  EXPECT_NE(r.err.find("FAILED_PRECONDITION"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("UNSAFE_SIDE_EFFECT"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(kTensor), std::string::npos) << r.err;
  EXPECT_EQ(JobCount(), before) << "a job row was created despite the findings";

  // The same job without the planted write passes the real preflight and runs.
  auto clean = SubmitWithPreflight("pf-real-clean", {"--set", "compile.backend=jit", "--wait"});
  EXPECT_EQ(clean.exit_code, 0) << clean.err;
  EXPECT_EQ(JobCount(), before + 1);
}

// --shrink runs a small model of the same structure, but says whether the full model
// fits a worker of the fleet: this one fits none (dim 65536: terabytes a rank).
TEST_F(PreflightRealRunnerTest, ShrinkStillHoldsTheFullModelAgainstTheLargestWorker) {
  auto r =
      RunCommand({TRAINYARD_CLI, "preflight", TRAINYARD_EXAMPLES "/debug.toml", "--set", "model.dim=65536", "--set",
                  "model.n_layers=4", "--shrink", "--controller", address_, "--train-binary", TRAINYARD_TRAIN});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;  // a finding: submitting it would be refused
  EXPECT_NE(r.out.find("\nfleet:      the full model needs "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(", more than the largest worker has (w1: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("submit would be refused as it is"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\nrunner:     1 rank of the shrunk model, "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("preflight: FINDINGS: the shrunk run was clean"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("but the full model fits no worker of the fleet"), std::string::npos) << r.out;
}

// The preflight, on a model no machine holds: refused before any rank starts,
// with the figure and what to do. The CLI runs under `ulimit -d` 3 GiB (RLIMIT_DATA,
// which every process it starts inherits) so that a runner started anyway would fail
// allocating its weights (exit 6, "can't allocate memory") instead of meeting the OOM
// killer; the test then fails on the exit status.
TEST(PreflightRealCliTest, AModelNoMachineHoldsIsRefusedBeforeItsRunnerStarts) {
  auto r = RunCommand({"/bin/sh", "-c", "ulimit -d 3145728 && exec \"$0\" \"$@\"", TRAINYARD_CLI, "preflight",
                       TRAINYARD_EXAMPLES "/debug.toml", "--set", "model.dim=65536", "--set", "model.n_layers=48",
                       "--train-binary", TRAINYARD_TRAIN});
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_NE(r.out.find("preflight: refused, no runner was started: the runner would need about "), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("estimated at dp=1 dp_shard=1 tp=1 ep=1"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("it can give ("), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("no layout of dp·tp=1 ranks fits"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--shrink runs the same structure"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("COMPILE"), std::string::npos) << "a rank ran: " << r.out;

  // With --shrink the same model's runner fits, and runs under its cap.
  auto shrunk = RunCommand({"/bin/sh", "-c", "ulimit -d 3145728 && exec \"$0\" \"$@\"", TRAINYARD_CLI, "preflight",
                            TRAINYARD_EXAMPLES "/debug.toml", "--set", "model.dim=65536", "--set", "model.n_layers=2",
                            "--shrink", "--controller", "127.0.0.1:1", "--train-binary", TRAINYARD_TRAIN});
  EXPECT_EQ(shrunk.exit_code, 0) << shrunk.out << shrunk.err;
  EXPECT_NE(shrunk.out.find("fleet:      not checked"), std::string::npos) << shrunk.out;
  EXPECT_NE(shrunk.out.find("each process capped at 3 GiB (RLIMIT_DATA)"), std::string::npos) << shrunk.out;
  EXPECT_NE(shrunk.out.find("preflight: clean"), std::string::npos) << shrunk.out;
}

TEST(PreflightRealCliTest, ShrunkPreflightNamesThePlantedTensorAndExitsOne) {
  auto r = RunCommand({TRAINYARD_CLI, "preflight", TRAINYARD_EXAMPLES "/debug.toml", "--shrink", "--set",
                       "compile.backend=jit", "--set", "compile.test_plant_side_effect=true", "--train-binary",
                       TRAINYARD_TRAIN});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;  // findings
  EXPECT_NE((r.out + r.err).find(kTensor), std::string::npos) << r.out << r.err;
  auto clean = RunCommand({TRAINYARD_CLI, "preflight", TRAINYARD_EXAMPLES "/debug.toml", "--shrink", "--set",
                           "compile.backend=jit", "--train-binary", TRAINYARD_TRAIN, "--controller",
                           "127.0.0.1:1"});  // no fleet to check
  EXPECT_EQ(clean.exit_code, 0) << clean.out << clean.err;
  EXPECT_NE(clean.out.find("COMPILE"), std::string::npos) << clean.out;
}

}  // namespace
}  // namespace trainyard::testing
