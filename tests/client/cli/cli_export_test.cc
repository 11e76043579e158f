// `trainyard export` through RunCli: with a job id it asks the (fake) controller for the
// job and exports from spec.checkpoint.dir/<job id>/, with the job's id and spec in the
// file's metadata; --checkpoint needs no controller; the exit codes and messages of an
// absent --step (listing the steps present), a job without checkpoint.dir, an unknown
// job, an output that exists (refused unless --force) and missing arguments. The
// checkpoints are written by hand (tests/worker/engine/checkpoint/synthetic_checkpoint.h).
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "client/cli/cli_format.h"
#include "common/events/proto_json.h"
#include "tests/client/cli/cli_test_fixture.h"
#include "tests/worker/engine/checkpoint/synthetic_checkpoint.h"

namespace trainyard::testing {
namespace {

namespace fs = std::filesystem;
using engine::testing::ExpectedBytes;
using engine::testing::ReadRawSafetensors;
using engine::testing::SyntheticSlice;
using engine::testing::WriteSyntheticCheckpoint;

std::vector<std::vector<SyntheticSlice>> Ranks() {
  return {{{"tok_embeddings.weight", {6, 4}, {0, 0}, {6, 4}}, {"layers.0.attention.wq.weight", {8, 4}, {0, 0}, {4, 4}},
           {"optim.m.tok_embeddings.weight", {6, 4}, {0, 0}, {6, 4}}},
          {{"layers.0.attention.wq.weight", {8, 4}, {4, 0}, {4, 4}}}};
}

class CliExportTest : public CliTest {
 protected:
  void SetUp() override {
    CliTest::SetUp();
    root_ = ::testing::TempDir() + "cliexport_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::remove_all(root_);
    fs::create_directories(root_ + "/out");
    v1::Job job = service_.AddJob("job-3", v1::Job::SUCCEEDED, 10);
    job.mutable_spec()->mutable_checkpoint()->set_dir(root_ + "/ck");
    job.mutable_spec()->mutable_checkpoint()->set_interval(5);
    service_.PutJob(job);
    WriteSyntheticCheckpoint(root_ + "/ck/job-3", 5, Ranks());
    WriteSyntheticCheckpoint(root_ + "/ck/job-3", 10, Ranks());
  }
  void TearDown() override { fs::remove_all(root_); }

  int Export(std::vector<std::string> args) {
    args.insert(args.begin(), {"--controller", address_, "export"});
    return RunRaw(args);
  }

  std::string root_;
};

TEST_F(CliExportTest, ExportsTheJobsNewestCheckpointWithItsSpecInTheMetadata) {
  const std::string out = root_ + "/out/model.safetensors";
  ASSERT_EQ(Export({"job-3", "-o", out}), cli::kExitOk) << err_.str();
  EXPECT_NE(out_.str().find("exported step 10 (dp=2 tp=1 ep=1) from " + root_ + "/ck/job-3/step-00000010-attempt-1: 2 "
                            "tensors"),
            std::string::npos)
      << out_.str();
  const auto file = ReadRawSafetensors(out);
  EXPECT_EQ(file.names, (std::vector<std::string>{"tok_embeddings.weight", "layers.0.attention.wq.weight"}));
  EXPECT_TRUE(file.tensors.at("layers.0.attention.wq.weight").bytes == ExpectedBytes("layers.0.attention.wq.weight", {8, 4}));
  EXPECT_EQ(file.metadata.at("trainyard.job_id"), "job-3");
  EXPECT_EQ(file.metadata.at("trainyard.step"), "10");
  EXPECT_EQ(file.metadata.at("trainyard.spec"), ToJsonLine(service_.Job("job-3").spec()));
  const auto spec = nlohmann::json::parse(file.metadata.at("trainyard.spec"));
  EXPECT_EQ(spec["checkpoint"]["dir"], root_ + "/ck");
}

TEST_F(CliExportTest, StepAbsentListsTheStepsAndStepPresentExportsIt) {
  EXPECT_EQ(Export({"job-3", "--step", "7", "-o", root_ + "/out/m.safetensors"}), cli::kExitNotFound);
  EXPECT_NE(err_.str().find("no complete checkpoint of step 7 under '" + root_ + "/ck/job-3'; steps present: 5, 10"),
            std::string::npos)
      << err_.str();
  ASSERT_EQ(Export({"job-3", "--step", "5", "-o", root_ + "/out/m.safetensors", "--output", "json"}), cli::kExitOk)
      << err_.str();
  const auto line = nlohmann::json::parse(out_.str());
  EXPECT_EQ(line["step"], 5);
  EXPECT_EQ(line["job_id"], "job-3");
  EXPECT_EQ(line["tensors"], 2);
  EXPECT_EQ(line["bytes"], fs::file_size(root_ + "/out/m.safetensors"));
}

TEST_F(CliExportTest, CheckpointFlagNeedsNoController) {
  const std::string out = root_ + "/out/m.safetensors";
  const std::vector<std::string> args = {"--controller", "127.0.0.1:1", "--timeout", "1", "export", "--checkpoint",
                                         root_ + "/ck/job-3", "-o", out, "--names", "hf"};
  ASSERT_EQ(RunRaw(args), cli::kExitOk) << err_.str();
  const auto file = ReadRawSafetensors(out);
  EXPECT_EQ(file.names, (std::vector<std::string>{"model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.weight"}));
  EXPECT_EQ(file.metadata.count("trainyard.job_id"), 0u);
}

TEST_F(CliExportTest, RefusalsAndTheirExitCodes) {
  const std::string out = root_ + "/out/m.safetensors";
  std::ofstream(out) << "x";
  EXPECT_EQ(Export({"job-3", "-o", out}), cli::kExitError);
  EXPECT_NE(err_.str().find("ALREADY_EXISTS: output '" + out + "' exists (give --force to replace it)"), std::string::npos)
      << err_.str();
  EXPECT_EQ(fs::file_size(out), 1u);
  EXPECT_EQ(Export({"job-3", "-o", out, "--force"}), cli::kExitOk) << err_.str();
  EXPECT_GT(fs::file_size(out), 1u);

  EXPECT_EQ(Export({"job-404", "-o", root_ + "/out/n.safetensors"}), cli::kExitNotFound);
  service_.AddJob("job-4", v1::Job::SUCCEEDED, 3);  // no checkpoint.dir
  EXPECT_EQ(Export({"job-4", "-o", root_ + "/out/n.safetensors"}), cli::kExitError);
  EXPECT_NE(err_.str().find("job 'job-4' has no checkpoint.dir"), std::string::npos) << err_.str();
  EXPECT_EQ(Export({"-o", root_ + "/out/n.safetensors"}), cli::kExitUsage);
  EXPECT_NE(err_.str().find("give a job id or --checkpoint DIR"), std::string::npos) << err_.str();
  EXPECT_EQ(Export({"job-3"}), cli::kExitUsage);  // -o is required
  EXPECT_EQ(Export({"job-3", "-o", root_ + "/out/n.safetensors", "--names", "llama"}), cli::kExitUsage);
  EXPECT_EQ(Export({"job-3", "-o", root_ + "/nope/n.safetensors"}), cli::kExitNotFound);
  EXPECT_FALSE(fs::exists(root_ + "/out/n.safetensors"));
}

TEST_F(CliExportTest, BestTakesTheLowestFiniteMetricAndLeavesNoPin) {
  const std::string jobs = root_ + "/ck/job-3";
  // Steps 5 and 10 (SetUp) have no metric; 15 is NaN (never best); 20 and 25 tie at the
  // lowest, 30 is higher.
  WriteSyntheticCheckpoint(jobs, 15, Ranks(), 1, engine::CheckpointMetric{"val_loss", std::nan("")});
  WriteSyntheticCheckpoint(jobs, 20, Ranks(), 1, engine::CheckpointMetric{"val_loss", 1.25});
  WriteSyntheticCheckpoint(jobs, 25, Ranks(), 1, engine::CheckpointMetric{"val_loss", 1.25});
  WriteSyntheticCheckpoint(jobs, 30, Ranks(), 1, engine::CheckpointMetric{"val_loss", 2.5});
  const std::string out = root_ + "/out/best.safetensors";
  ASSERT_EQ(Export({"job-3", "--best", "-o", out}), cli::kExitOk) << err_.str();
  EXPECT_NE(out_.str().find("exported step 25 (dp=2 tp=1 ep=1, val_loss 1.25) from " + jobs +
                            "/step-00000025-attempt-1"),
            std::string::npos)
      << out_.str();
  EXPECT_EQ(ReadRawSafetensors(out).metadata.at("trainyard.step"), "25");
  EXPECT_TRUE(fs::is_empty(jobs + "/step-00000025-attempt-1/pins")) << "the export's pin is gone once it is done";

  EXPECT_EQ(Export({"job-3", "--best", "--step", "5", "-o", root_ + "/out/x.safetensors"}), cli::kExitUsage);
  EXPECT_NE(err_.str().find("excludes"), std::string::npos) << err_.str();
  EXPECT_EQ(Export({"--checkpoint", jobs + "/step-00000020-attempt-1", "--best", "-o", root_ + "/out/x.safetensors"}),
            cli::kExitUsage);
  EXPECT_NE(err_.str().find("is one checkpoint; --best chooses among a folder of them"), std::string::npos)
      << err_.str();
}

TEST_F(CliExportTest, BestWithoutAnyMetricSaysWhy) {
  EXPECT_EQ(Export({"job-3", "--best", "-o", root_ + "/out/x.safetensors"}), cli::kExitNotFound);
  EXPECT_NE(err_.str().find("no checkpoint under '" + root_ + "/ck/job-3' has a metric to rank by (2 complete, 2 "
                            "without a finite metric); checkpoint.keep_best records one"),
            std::string::npos)
      << err_.str();
  EXPECT_FALSE(fs::exists(root_ + "/out/x.safetensors"));
}

}  // namespace
}  // namespace trainyard::testing
