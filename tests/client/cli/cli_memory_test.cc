// The memory per rank `trainyard preflight` and `trainyard explain` print
// (client/cli/memory_format.h over spec::EstimateRankMemory). The debug preset's figure,
// 407 MiB, is what the engine's tensor tracker measured for one rank of
// examples/debug.toml (426,660,200 bytes at steps 1 to 3; bench/memory_table.cc).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "client/cli/memory_format.h"
#include "client/cli/preflight_command.h"
#include "common/base/posix_process_launcher.h"
#include "common/spec/presets.h"
#include "tests/client/cli/cli_test_fixture.h"
#include "tests/support/temp_dir.h"

namespace trainyard {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

spec::JobSpec Debug(std::vector<std::string> sets = {}) {
  spec::Result<spec::JobSpec> s = spec::FromPreset("debug", sets);
  EXPECT_TRUE(s.ok());
  return s.value();
}

TEST(CliMemoryTest, PrintsThePeakByPart) {
  const std::string text = cli::FormatMemoryEstimate(Debug());
  // 7,741,696 parameters (debug: 2·2048·256 embedding and head, 256 final norm, a dense
  // layer of 786,944, three MoE layers of 1,968,640): 29.5 MiB at 4 B, AdamW 59.1 MiB.
  EXPECT_THAT(text, StartsWith("memory:     407 MiB per rank at its peak, the loss's backward (estimate, "
                               "docs/memory.md)\n"
                               "            dp=1 dp_shard=1 tp=1 ep=1 activation_checkpoint.mode=none "
                               "training.mixed_precision=fp32\n"));
  EXPECT_THAT(text, HasSubstr("\n  parameters      29.5 MiB  fp32 master weights, 7.74M of 7.74M parameters\n"));
  EXPECT_THAT(text, HasSubstr("\n  gradients            0 B  fp32, of 29.5 MiB (those that exist at the peak)\n"));
  EXPECT_THAT(text, HasSubstr("\n  optimizer       59.1 MiB  AdamW's m and v, fp32\n"));
  EXPECT_THAT(text, HasSubstr("\n  communication   29.5 MiB  gradient buckets 29.5 MiB, EP all-to-all rows 0 B\n"));
  EXPECT_THAT(text, HasSubstr("\n  activations      289 MiB  saved for backward"));
  // bf16: the same state, bf16 copies of every weight but the embedding (7.22M · 2 B);
  // attention on CPU keeps the fused kernel's fp32 tensors, probabilities included.
  const std::string bf16 = cli::FormatMemoryEstimate(Debug({"training.mixed_precision=\"bf16\""}));
  EXPECT_THAT(bf16, StartsWith("memory:     381 MiB per rank"));
  EXPECT_THAT(bf16, HasSubstr("\n  weight copies   13.8 MiB  bf16 copies of the weights kept for backward\n"));
}

TEST(CliMemoryTest, ShardedDataParallelismShowsTheShardsAndTheGatheredCopy) {
  // debug at dp=4 dp_shard=4 ep=2: of a rank's 5,382,400 parameters the 4 routed experts
  // of each MoE layer (3 · 4 · 196,608 = 2,359,296) are sharded over 4·1/2 = 2 ranks, the
  // other 3,023,104 over 4: 755,776 + 1,179,648 = 1,935,424 kept between steps,
  // 16 B each = 29.5 MiB; their fp32 rows 7.38 MiB, AdamW's 14.8 MiB; the step gathers
  // all 5,382,400 whole (20.5 MiB), so parameters are 7.38 + 20.5 = 27.9 MiB.
  const std::vector<std::string> sets = {"parallelism.dp=4", "parallelism.dp_shard=4", "parallelism.ep=2"};
  const std::string text = cli::FormatMemoryEstimate(Debug(sets));
  EXPECT_THAT(text, HasSubstr("\n            dp=4 dp_shard=4 tp=1 ep=2 activation_checkpoint.mode=none "
                              "training.mixed_precision=fp32\n"
                              "            state between steps 29.5 MiB per rank (weights, gradients, AdamW: 16 B a "
                              "parameter of its shards; dp_shard=4, routed experts over 2 ranks)\n"));
  EXPECT_THAT(text, HasSubstr("\n  parameters      27.9 MiB  fp32 shards 7.38 MiB (1.94M of 5.38M local parameters) "
                              "+ 20.5 MiB gathered whole for the step\n"));
  EXPECT_THAT(text, HasSubstr("  fp32, of 20.5 MiB full and 7.38 MiB of shards (those that exist at the peak)\n"));
  EXPECT_THAT(text, HasSubstr("\n  optimizer       14.8 MiB  AdamW's m and v of the shards, fp32\n"));
  const nlohmann::json m = nlohmann::json::parse(cli::MemoryEstimateJsonLine(Debug(sets))).at("memory_estimate");
  EXPECT_EQ(m.at("dp_shard"), 4);
  EXPECT_EQ(m.at("expert_shard"), 2);
  EXPECT_EQ(m.at("rank_params").get<double>(), 5382400);
  EXPECT_EQ(m.at("shard_params").get<double>(), 1935424);
  EXPECT_EQ(m.at("gathered_parameters").get<double>(), 4.0 * 5382400);
  EXPECT_EQ(m.at("state_bytes").get<double>(), 16.0 * 1935424);
  EXPECT_EQ(m.at("optimizer").get<double>(), 8.0 * 1935424);
}

TEST(CliMemoryTest, JsonLineAndARefusedSpec) {
  const nlohmann::json j = nlohmann::json::parse(cli::MemoryEstimateJsonLine(Debug()));
  const nlohmann::json& m = j.at("memory_estimate");
  EXPECT_EQ(m.at("rank_params").get<double>(), 7741696);
  EXPECT_EQ(m.at("parameters").get<double>(), 4.0 * 7741696);
  EXPECT_EQ(m.at("optimizer").get<double>(), 8.0 * 7741696);
  EXPECT_NEAR(m.at("total_bytes").get<double>(), 426660200, 1024) << "the measured peak";
  EXPECT_EQ(m.at("peak_at"), "the loss's backward");
  EXPECT_EQ(m.at("fused_cpu_kernels"), true);
  // Replicated: the whole 16 B a parameter stays between steps, nothing is gathered.
  EXPECT_EQ(m.at("dp_shard"), 1);
  EXPECT_EQ(m.at("shard_params").get<double>(), 7741696);
  EXPECT_EQ(m.at("gathered_parameters").get<double>(), 0);
  EXPECT_EQ(m.at("state_bytes").get<double>(), 16.0 * 7741696);
  v1::JobSpec refused;
  refused.mutable_model()->set_dim(7);  // not a multiple of n_heads
  EXPECT_THAT(cli::FormatMemoryEstimate(refused), StartsWith("memory:     no estimate: "));
}

// `trainyard preflight` prints the estimate before its runner's events and verdict; with
// --json on stderr, so stdout stays the runner's Event lines.
TEST(CliMemoryTest, PreflightPrintsTheEstimateFirst) {
  testing::TempDir dir;
  PosixProcessLauncher launcher;
  cli::PreflightCommandOptions options;
  options.job_file = std::string(TRAINYARD_EXAMPLES) + "/debug.toml";
  options.train_binary = dir.WriteScript(
      "trainyard-train", "case \" $* \" in *\" --print-config \"*) cat \"$1\"; exit 0 ;; esac\nexit 0\n");
  options.spec_dir = dir.path();
  std::ostringstream out, err;
  ASSERT_EQ(cli::RunPreflightCommand(options, &launcher, SystemClock(), out, err), cli::kPreflightClean) << err.str();
  EXPECT_THAT(out.str(), StartsWith("memory:     407 MiB per rank at its peak"));
  EXPECT_THAT(out.str(), HasSubstr("\npreflight: clean"));

  options.json = true;
  options.sets = {"parallelism.dp=2", "parallelism.ep=2"};
  std::ostringstream jout, jerr;
  ASSERT_EQ(cli::RunPreflightCommand(options, &launcher, SystemClock(), jout, jerr), cli::kPreflightClean);
  EXPECT_EQ(jout.str(), "");
  std::istringstream lines(jerr.str());
  std::string first;
  std::getline(lines, first);
  const nlohmann::json m = nlohmann::json::parse(first).at("memory_estimate");
  EXPECT_EQ(m.at("layout"), "dp=2 dp_shard=1 tp=1 ep=2 activation_checkpoint.mode=none training.mixed_precision=fp32");
  // ep=2: 4 of the 8 experts (3 · 256·256 each) of each MoE layer leave the rank.
  EXPECT_EQ(m.at("rank_params").get<double>(), 7741696 - 3 * 4 * 196608.0);
}

class CliMemoryExplainTest : public testing::CliTest {};

TEST_F(CliMemoryExplainTest, ExplainPrintsTheBreakdownOfTheJobsSpec) {
  // The fake's job spec names only the job: the debug preset, as the controller resolves it.
  service_.AddJob("j1", v1::Job::RUNNING, 20);
  ASSERT_EQ(RunRaw({"--controller", address_, "explain", "j1"}), 0) << err_.str();
  EXPECT_THAT(out_.str(), HasSubstr("\nmemory:     407 MiB per rank at its peak, the loss's backward"));
  EXPECT_THAT(out_.str(), HasSubstr("\n  activations      289 MiB"));
}

}  // namespace
}  // namespace trainyard
