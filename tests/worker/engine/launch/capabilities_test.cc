// `trainyard-rank --capabilities` against the compile-time facts of this test's own
// build (the same LibTorch headers and definitions as the engine's: this file is
// compiled with trainyard_engine_base's flags), and what it reports true: a bf16 rank
// trains. (cudagraph is reported false until a GPU run proves it; it needs
// resources.device=cuda, which a machine without a GPU refuses first.)
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/version.h>

#include "common/events/proto_json.h"
#include "trainyard/v1/device.pb.h"

#if defined(TRAINYARD_TORCH_CUDA) && __has_include(<cuda.h>)
#include <cuda.h>
#endif

namespace trainyard {
namespace {

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream buf;
  buf << in.rdbuf();
  return buf.str();
}

std::string TempFile(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + "capabilities_" + std::to_string(::getpid()) + "_" + name;
  std::ofstream(path) << text;
  return path;
}

struct Outcome {
  int exit_code;
  std::string out;
  std::string err;
};

// Runs `program args` from an empty folder (no job file, no config around it).
Outcome RunProgram(const std::string& program, const std::string& args, const std::string& tag) {
  const std::string dir = ::testing::TempDir() + "capabilities_cwd_" + std::to_string(::getpid());
  const std::string out = ::testing::TempDir() + "capabilities_" + tag + ".out";
  const std::string err = ::testing::TempDir() + "capabilities_" + tag + ".err";
  const std::string cmd = "mkdir -p " + dir + " && cd " + dir + " && " + program + " " + args + " > " + out +
                          " 2> " + err + " < /dev/null";
  const int status = std::system(cmd.c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, Slurp(out), Slurp(err)};
}

// What this build is, from the macros alone (not through the engine's helpers).
std::string ExpectedTorchVersion() {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%d.%d.%d", TORCH_VERSION_MAJOR, TORCH_VERSION_MINOR, TORCH_VERSION_PATCH);
  return buf;
}

#if defined(TRAINYARD_TORCH_CUDA)
constexpr bool kCuda = true;
#else
constexpr bool kCuda = false;
#endif
#if defined(USE_C10D_NCCL)
constexpr bool kNccl = true;
#else
constexpr bool kNccl = false;
#endif

TEST(RankCapabilitiesTest, PrintsOneLineOfThisBuildsFactsWithoutAConfig) {
  const Outcome o = RunProgram(TRAINYARD_RANK, "--capabilities", "caps");
  ASSERT_EQ(o.exit_code, 0) << o.err;
  // Exactly one line.
  ASSERT_FALSE(o.out.empty());
  EXPECT_EQ(o.out.back(), '\n');
  EXPECT_EQ(o.out.find('\n'), o.out.size() - 1) << o.out;

  const nlohmann::json caps = nlohmann::json::parse(o.out);
  std::set<std::string> keys;
  for (const auto& item : caps.items()) keys.insert(item.key());
  // Every field printed, false and "" included, under its .proto name.
  EXPECT_EQ(keys, (std::set<std::string>{"libtorch_version", "cuda", "cuda_version", "nccl", "bf16", "cudagraph"}));
  EXPECT_EQ(caps.at("libtorch_version"), ExpectedTorchVersion());
  EXPECT_EQ(caps.at("cuda"), kCuda && kNccl);  // CUDA jobs need NCCL too
  EXPECT_EQ(caps.at("nccl"), kNccl);
  // Every engine has the bf16 path (CPU and CUDA); cudagraph stays unproven (false).
  EXPECT_EQ(caps.at("bf16"), true);
  EXPECT_EQ(caps.at("cudagraph"), false);
#if defined(TRAINYARD_TORCH_CUDA) && defined(CUDA_VERSION)
  EXPECT_EQ(caps.at("cuda_version"), std::to_string(CUDA_VERSION / 1000) + "." +
                                         std::to_string((CUDA_VERSION % 1000) / 10));
#elif defined(TRAINYARD_TORCH_CUDA)
  EXPECT_TRUE(caps.at("cuda_version").is_string());
#else
  EXPECT_EQ(caps.at("cuda_version"), "");
#endif

  // The worker reads it with the strict proto3 JSON parser.
  v1::EngineCapabilities parsed;
  std::string line = o.out.substr(0, o.out.size() - 1);
  ASSERT_TRUE(FromJson(line, &parsed).ok()) << line;
  EXPECT_EQ(parsed.libtorch_version(), ExpectedTorchVersion());
  EXPECT_EQ(parsed.cuda(), kCuda && kNccl);

  // The same line every time.
  EXPECT_EQ(RunProgram(TRAINYARD_RANK, "--capabilities", "caps2").out, o.out);
}

// The project builds against the pinned torch wheel (deploy/python-requirements.txt), a
// LibTorch with CUDA and NCCL, also on machines without a GPU: every CUDA-only source is
// compiled and linked, and the build reports what it can run.
TEST(RankCapabilitiesTest, ThePinnedLibTorchIsACudaAndNcclBuild) {
  const Outcome o = RunProgram(TRAINYARD_RANK, "--capabilities", "pinned");
  ASSERT_EQ(o.exit_code, 0) << o.err;
  const nlohmann::json caps = nlohmann::json::parse(o.out);
  EXPECT_EQ(caps.at("libtorch_version"), TRAINYARD_TORCH_VERSION) << "the LibTorch CMake found";
  EXPECT_EQ(caps.at("cuda"), true) << o.out;
  EXPECT_EQ(caps.at("nccl"), true) << o.out;
  EXPECT_NE(caps.at("cuda_version").get<std::string>(), "") << o.out;
}

// With no GPU visible (this machine, CI), a device=cuda job is still refused before any
// rank starts, saying why.
TEST(RankCapabilitiesTest, ACudaJobWithoutAVisibleGpuIsRefusedAtConfigTime) {
  if (::access("/dev/nvidia0", F_OK) == 0) GTEST_SKIP() << "a GPU is present";
  const std::string job = TempFile("cuda.toml", "[model]\npreset = \"tiny\"\n[training]\nsteps = 3\n");
  const Outcome o = RunProgram(TRAINYARD_TRAIN, job + " --set resources.device=cuda --json", "cuda_refused");
  EXPECT_EQ(o.exit_code, 2) << o.err;
  EXPECT_NE(o.err.find(std::string("config: resources.device=cuda: this engine was built against LibTorch ") +
                       TRAINYARD_TORCH_VERSION + " with CUDA, but no CUDA device is visible"),
            std::string::npos)
      << o.err;
  EXPECT_EQ(o.out, "");  // no rank ran
}

TEST(RankCapabilitiesTest, WithoutCapabilitiesAConfigIsStillRequired) {
  const Outcome o = RunProgram(TRAINYARD_RANK, "", "noconfig");
  EXPECT_NE(o.exit_code, 0);
  EXPECT_NE(o.err.find("--config is required"), std::string::npos) << o.err;
  EXPECT_EQ(o.out, "");
}

// What the report says true runs: a bf16 rank trains, says which bf16 GEMM path it
// runs, and measures MFU against the bf16 peak.
TEST(RankCapabilitiesTest, ABf16RankTrainsAndNamesItsGemmPath) {
  const std::string config = TempFile(
      "bf16.json", R"({"model": {"preset": "tiny"}, "training": {"steps": 2, "mixed_precision": "bf16"}})");
  const Outcome o = RunProgram(TRAINYARD_RANK, "--config " + config, "rank_bf16");
  EXPECT_EQ(o.exit_code, 0) << o.err;
  EXPECT_NE(o.out.find("mixed_precision=bf16 bf16_gemm=\\\""), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("(bf16) torch="), std::string::npos) << "MFU's peak is the bf16 one: " << o.out;
  EXPECT_NE(o.out.find("step_metrics"), std::string::npos) << o.out;
}

TEST(RankCapabilitiesTest, TrainNormalisesThePrecisionItRuns) {
  const std::string job = TempFile("job.toml", "[model]\npreset = \"tiny\"\n[training]\nsteps = 2\n");
  // fp32 is the default; bf16 is accepted as given.
  const Outcome fp32 = RunProgram(TRAINYARD_TRAIN, job + " --print-config", "train_fp32");
  ASSERT_EQ(fp32.exit_code, 0) << fp32.err;
  EXPECT_EQ(nlohmann::json::parse(fp32.out).at("training").at("mixed_precision"), "fp32") << fp32.out;
  const Outcome bf16 =
      RunProgram(TRAINYARD_TRAIN, job + " --set training.mixed_precision=bf16 --print-config", "train_bf16");
  ASSERT_EQ(bf16.exit_code, 0) << bf16.err;
  EXPECT_EQ(nlohmann::json::parse(bf16.out).at("training").at("mixed_precision"), "bf16") << bf16.out;
}

}  // namespace
}  // namespace trainyard
