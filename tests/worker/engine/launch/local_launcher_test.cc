// The local runner: job-file normalisation in process, and the real trainyard-train
// binary spawning real trainyard-rank processes on loopback.
#include "worker/engine/launch/local_launcher.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <thread>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/events/proto_json.h"
#include "common/spec/json_io.h"
#include "worker/engine/config/engine_config.h"

namespace trainyard::engine {
namespace {

std::string TempFile(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + "launcher_" + std::to_string(::getpid()) + "_" + name;
  std::ofstream(path) << text;
  return path;
}

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream buf;
  buf << in.rdbuf();
  return buf.str();
}

std::string ConfigError(const std::string& path, const std::vector<std::string>& overrides = {}) {
  try {
    LoadLocalJob(path, overrides);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(no error)";
}

const char* kToml = R"(# a job file as the controller takes it
[job]
name = "parity"

[model]
preset = "tiny"
top_k = 1

[training]
steps = 3
seed = 7
lr = 1e-3

[parallelism]
dp = 2
)";

// The same job as proto3 JSON: 64-bit integers as strings, floats written as integers.
const char* kJson = R"({"job": {"name": "parity"},
  "model": {"preset": "tiny", "top_k": 1},
  "training": {"steps": 3, "seed": "7", "lr": 0.001},
  "parallelism": {"dp": 2, "collective_timeout_s": 300}})";

TEST(LocalJobConfigTest, TomlAndJsonGiveTheSameNormalisedConfig) {
  const std::vector<std::string> overrides = {"training.log_freq=2", "job.name=123"};
  const spec::JobSpec from_toml = LoadLocalJob(TempFile("job.toml", kToml), overrides);
  const spec::JobSpec from_json = LoadLocalJob(TempFile("job.json", kJson), overrides);
  EXPECT_EQ(spec::ToJson(from_toml), spec::ToJson(from_json));

  // Preset, explicit keys, overrides and defaults all landed where the controller puts them.
  EXPECT_EQ(from_toml.model.dim, 64);             // tiny preset
  EXPECT_EQ(from_toml.model.top_k, 1);            // explicit key beats the preset
  EXPECT_EQ(from_toml.training.seq_len, 32);      // preset training size
  EXPECT_EQ(from_toml.training.warmup_steps, 3);  // min(10, steps) when not given
  EXPECT_EQ(from_toml.training.log_freq, 2);
  EXPECT_EQ(from_toml.training.seed, 7u);
  EXPECT_EQ(from_toml.job.name, "123");  // string keys take the text literally
  EXPECT_EQ(from_toml.compile.backend, "eager");
  EXPECT_EQ(from_toml.parallelism.world_size(), 2);
}

TEST(LocalJobConfigTest, PresetDefaultsMatchTheDebugReference) {
  const spec::JobSpec c = PresetJob("debug", {});
  EXPECT_EQ(c.model.vocab_size, 2048);
  EXPECT_EQ(c.model.n_routed_experts, 8);
  EXPECT_EQ(c.training.batch_size, 8);
  EXPECT_EQ(c.training.seq_len, 256);
  EXPECT_EQ(c.training.warmup_steps, 10);
  EXPECT_EQ(PresetJob("tiny", {"parallelism.dp=2", "parallelism.tp=2"}).parallelism.world_size(), 4);
}

TEST(LocalJobConfigTest, RulesAreTheControllersRules) {
  const std::string ok = TempFile("rules.toml", kToml);
  EXPECT_EQ(ConfigError(ok, {"training.lr=20"}), "--set training.lr=20: training.lr must be in (0, 10], got 20");
  EXPECT_EQ(ConfigError(ok, {"model.vocab_size=1"}),
            "--set model.vocab_size=1: model.vocab_size must be in [2, 16777216], got 1");
  EXPECT_EQ(ConfigError(ok, {"training.step_timeout_s=-1"}),
            "--set training.step_timeout_s=-1: training.step_timeout_s must be in [0, 10000000], got -1");
}

TEST(LocalJobConfigTest, BadInputNamesTheFileLineAndField) {
  const std::string typo = TempFile("typo.toml", "[model]\npreset = \"tiny\"\ndimm = 3\n");
  EXPECT_NE(ConfigError(typo).find(typo + ":3:1: unknown key model.dimm"), std::string::npos) << ConfigError(typo);
  const std::string type = TempFile("type.toml", "[training]\nsteps = \"many\"\n");
  EXPECT_NE(ConfigError(type).find(type + ":2:9: training.steps: expected integer, got string"), std::string::npos)
      << ConfigError(type);
  const std::string syntax = TempFile("syntax.toml", "[training\n");
  EXPECT_NE(ConfigError(syntax).find(syntax + ":1:"), std::string::npos) << ConfigError(syntax);
  const std::string section = TempFile("section.json", R"({"modle": {"dim": 3}})");
  EXPECT_NE(ConfigError(section).find("unknown section [modle]"), std::string::npos) << ConfigError(section);
  const std::string ok = TempFile("ok.toml", kToml);
  EXPECT_NE(ConfigError(ok, {"training.steps=lots"}).find("--set training.steps: expected integer, got string"),
            std::string::npos);
  EXPECT_NE(ConfigError(ok, {"steps=3"}).find("expected section.key=value"), std::string::npos);
  EXPECT_NE(ConfigError(ok, {"model.preset=huge"}).find("unknown preset \"huge\""), std::string::npos);
  EXPECT_NE(ConfigError(::testing::TempDir() + "missing.toml").find("cannot open"), std::string::npos);
}

struct Outcome {
  int exit_code;
  std::string out;
  std::string err;
};

Outcome RunTrain(const std::string& args, const std::string& tag) {
  const std::string out = ::testing::TempDir() + "launcher_" + tag + ".out";
  const std::string err = ::testing::TempDir() + "launcher_" + tag + ".err";
  const std::string cmd = std::string(TRAINYARD_TRAIN) + " " + args + " > " + out + " 2> " + err;
  const int status = std::system(cmd.c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, Slurp(out), Slurp(err)};
}

// Each stdout line as a trainyard.v1.Event, strictly (the CLI's --json dialect).
std::vector<v1::Event> EventLines(const std::string& text) {
  std::vector<v1::Event> events;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    v1::Event e;
    const absl::Status parsed = FromJson(line, &e);
    EXPECT_TRUE(parsed.ok()) << parsed << "\n" << line;
    events.push_back(e);
  }
  return events;
}

TEST(TrainBinaryTest, TwoRanksPrintThreeStepObjects) {
  const std::string job = TempFile("run.toml", "[model]\npreset = \"tiny\"\n[training]\nsteps = 3\n");
  const Outcome o = RunTrain(job + " --nproc 2 --set parallelism.dp=2 --threads 1 --json", "run");
  ASSERT_EQ(o.exit_code, 0) << o.err;
  std::vector<v1::StepMetrics> steps;
  for (const v1::Event& e : EventLines(o.out)) {
    // Rank 0's events; other ranks contribute only their compile events.
    if (!e.has_compile()) {
      EXPECT_EQ(e.rank(), 0) << e.ShortDebugString();
    }
    if (e.has_step_metrics()) steps.push_back(e.step_metrics());
  }
  ASSERT_EQ(steps.size(), 3u) << o.out;
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(steps[i].step(), i + 1);
    EXPECT_GT(steps[i].loss(), 0);
    EXPECT_GT(steps[i].grad_norm(), 0);
    EXPECT_GT(steps[i].lr(), 0);
    EXPECT_GT(steps[i].tokens_per_s(), 0);
  }
}

TEST(TrainBinaryTest, InvalidConfigExitsNonZeroWithTheMessage) {
  const std::string job = TempFile("bad.toml", "[model]\npreset = \"tiny\"\ntop_k = 9\n");
  const Outcome o = RunTrain(job + " --json", "bad");
  EXPECT_NE(o.exit_code, 0);
  EXPECT_NE(o.err.find(job + ":3:9: model.top_k must be in [1, model.n_routed_experts=4], got 9"), std::string::npos)
      << o.err;
  EXPECT_EQ(o.out, "");

  const Outcome mismatch = RunTrain(job + " --set model.top_k=2 --nproc 3", "mismatch");
  EXPECT_NE(mismatch.exit_code, 0);
  EXPECT_NE(mismatch.err.find("--nproc 3 disagrees with parallelism.dp*tp = 1"), std::string::npos) << mismatch.err;
}

// On a machine without a visible GPU (CI's), resources.device=cuda is refused at config
// time, with the reason, before any rank starts (capabilities_test checks the words).
TEST(TrainBinaryTest, CudaDeviceWithoutCudaIsRefusedBeforeAnyRankStarts) {
  const std::string job = TempFile("cuda.toml", "[model]\npreset = \"tiny\"\n[training]\nsteps = 3\n");
  const Outcome o = RunTrain(job + " --set resources.device=cuda --json", "cuda");
  EXPECT_EQ(o.exit_code, 2) << o.err;
  EXPECT_NE(o.err.find("config: resources.device=cuda: this engine was built against LibTorch "), std::string::npos)
      << o.err;
  EXPECT_EQ(o.out, "");  // no rank ran
}

// A config that passes validation but fails inside the ranks: the launcher must stop
// the gang and report the failing rank's own error.
TEST(TrainBinaryTest, RankFailureStopsTheGangAndReportsItsError) {
  const std::string missing = ::testing::TempDir() + "no_such_tokens.u16";
  const std::string job = TempFile("fail.toml", "[model]\npreset = \"tiny\"\n[training]\nsteps = 3\n"
                                                "dataset = \"tokens\"\ndataset_path = \"" + missing + "\"\n"
                                                "[parallelism]\ndp = 2\ncollective_timeout_s = 20.0\n");
  const Outcome o = RunTrain(job + " --threads 1", "fail");
  EXPECT_NE(o.exit_code, 0);
  EXPECT_NE(o.err.find("trainyard-train: rank "), std::string::npos) << o.err;
  EXPECT_NE(o.err.find(missing), std::string::npos) << o.err;
}

std::vector<pid_t> ChildrenOf(pid_t parent) {
  std::vector<pid_t> children;
  DIR* proc = ::opendir("/proc");
  while (dirent* d = proc ? ::readdir(proc) : nullptr) {
    const pid_t pid = static_cast<pid_t>(std::atoi(d->d_name));
    if (pid <= 0) continue;
    std::ifstream stat("/proc/" + std::string(d->d_name) + "/stat");
    std::string line;
    std::getline(stat, line);
    const std::size_t close = line.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(line.substr(close + 2));
    char state;
    pid_t ppid = 0;
    rest >> state >> ppid;
    if (ppid == parent) children.push_back(pid);
  }
  if (proc) ::closedir(proc);
  return children;
}

// SIGTERM to the launcher stops every rank and exits 128+15.
TEST(TrainBinaryTest, SigtermStopsAllRanks) {
  const std::string job = TempFile("long.toml", "[model]\npreset = \"tiny\"\n[training]\nsteps = 1000000\n"
                                                "[parallelism]\ndp = 2\n");
  // Unique and absent before the launcher starts, so no earlier run's lines are seen.
  const std::string out = ::testing::TempDir() + "launcher_long_" + std::to_string(::getpid()) + ".out";
  ::unlink(out.c_str());
  const pid_t train = ::fork();
  ASSERT_GE(train, 0);
  if (train == 0) {
    const int fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(fd, 1);
    ::execl(TRAINYARD_TRAIN, TRAINYARD_TRAIN, job.c_str(), "--json", "--threads", "1", nullptr);
    ::_exit(127);
  }
  // Wait until training is under way (a step line), then look up the ranks.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (Slurp(out).find("step_metrics") == std::string::npos && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const std::vector<pid_t> ranks = ChildrenOf(train);
  EXPECT_EQ(ranks.size(), 2u);
  ASSERT_EQ(::kill(train, SIGTERM), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(train, &status, 0), train);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 128 + SIGTERM);
  for (pid_t r : ranks) EXPECT_NE(::kill(r, 0), 0) << "rank process " << r << " outlived the launcher";
}

}  // namespace
}  // namespace trainyard::engine
