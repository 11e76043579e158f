// `trainyard tensorboard` through RunCli against the fake controller: the files hold the
// job's stored events (a NaN loss too) in one run per attempt; every job is looked up
// before anything is written (an unknown or compacted job writes nothing); an existing
// DIR/JOB, an -o that is a file, a job named twice and a missing -o are refused with the
// CLI's exit codes; no staging folder is left behind.
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <map>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "client/cli/cli_format.h"
#include "common/base/file_io.h"
#include "tests/client/cli/cli_test_fixture.h"
#include "tests/common/tensorboard/tensorboard_files.h"

namespace trainyard::testing {
namespace {

namespace fs = std::filesystem;

class CliTensorBoardTest : public CliTest {
 protected:
  void SetUp() override {
    CliTest::SetUp();
    root_ = ::testing::TempDir() + "clitb_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::remove_all(root_);
    fs::create_directories(root_);
    v1::Job job = service_.AddJob("job-3", v1::Job::SUCCEEDED, 2);
    job.set_last_seq(5);
    job.mutable_spec()->mutable_training()->set_steps(2);
    service_.PutJob(job);
    v1::Event second = FakeJobService::StepEvent("job-3", 4, 1, 2.0);
    second.set_attempt(2);
    service_.SetEvents("job-3", {FakeJobService::StateEvent("job-3", 1, v1::Job::RUNNING),
                                 FakeJobService::StepEvent("job-3", 2, 1, 3.0),
                                 FakeJobService::StepEvent("job-3", 3, 2, std::numeric_limits<double>::quiet_NaN()),
                                 second, FakeJobService::StateEvent("job-3", 5, v1::Job::SUCCEEDED)});
  }
  void TearDown() override { fs::remove_all(root_); }

  // train/loss by step in DIR/job-3/attempt-A.
  std::map<int64_t, float> Losses(const std::string& dir, int attempt) {
    std::map<int64_t, float> out;
    const fs::path run = fs::path(dir) / "job-3" / ("attempt-" + std::to_string(attempt));
    for (const auto& f : fs::directory_iterator(run)) {
      std::string error;
      for (const auto& r : ParseRecords(*ReadFile(f.path().string(), 1 << 20), &error)) {
        for (const auto& v : r.summary().value()) {
          if (v.tag() == "train/loss") out[r.step()] = v.simple_value();
        }
      }
      EXPECT_EQ(error, "");
    }
    return out;
  }

  std::string root_;
};

TEST_F(CliTensorBoardTest, WritesOneRunPerAttemptFromTheStoredEvents) {
  const std::string out = root_ + "/runs";
  ASSERT_EQ(RunRaw({"--controller", address_, "tensorboard", "job-3", "-o", out, "--output", "json"}), cli::kExitOk)
      << err_.str();
  const nlohmann::json line = nlohmann::json::parse(out_.str());
  EXPECT_EQ(line.at("job_id"), "job-3");
  EXPECT_EQ(line.at("events"), 5);
  ASSERT_EQ(line.at("runs").size(), 2u) << line.dump();
  EXPECT_EQ(line.at("runs")[1].at("dir"), out + "/job-3/attempt-2");
  const std::map<int64_t, float> one = Losses(out, 1);
  ASSERT_EQ(one.size(), 2u);
  EXPECT_EQ(one.at(1), 3.0f);
  EXPECT_TRUE(std::isnan(one.at(2))) << "a NaN loss is written as stored";
  EXPECT_EQ(Losses(out, 2), (std::map<int64_t, float>{{1, 2.0f}}));
  std::vector<std::string> entries;
  for (const auto& e : fs::directory_iterator(out)) entries.push_back(e.path().filename().string());
  EXPECT_EQ(entries, std::vector<std::string>{"job-3"}) << "no staging folder left";

  // Again into the same folder: refused, and the files are as they were.
  const std::string before = *ReadFile(fs::directory_iterator(out + "/job-3/attempt-1")->path().string(), 1 << 20);
  EXPECT_EQ(RunRaw({"--controller", address_, "tensorboard", "job-3", "-o", out}), cli::kExitError);
  EXPECT_NE(err_.str().find("already exists"), std::string::npos) << err_.str();
  EXPECT_EQ(*ReadFile(fs::directory_iterator(out + "/job-3/attempt-1")->path().string(), 1 << 20), before);
}

TEST_F(CliTensorBoardTest, RefusalsWriteNothing) {
  const std::string out = root_ + "/runs";
  EXPECT_EQ(RunRaw({"--controller", address_, "tensorboard", "job-3", "job-404", "-o", out}), cli::kExitNotFound);
  EXPECT_NE(err_.str().find("job-404"), std::string::npos) << err_.str();
  EXPECT_FALSE(fs::exists(out + "/job-3"));

  v1::Job compacted = service_.AddJob("job-9", v1::Job::SUCCEEDED, 2);
  compacted.mutable_compacted()->set_events_removed(10);
  service_.PutJob(compacted);
  EXPECT_EQ(RunRaw({"--controller", address_, "tensorboard", "job-3", "job-9", "-o", out}), cli::kExitError);
  EXPECT_NE(err_.str().find("compacted"), std::string::npos) << err_.str();
  EXPECT_FALSE(fs::exists(out + "/job-3"));

  EXPECT_EQ(RunRaw({"--controller", address_, "tensorboard", "job-3", "job-3", "-o", out}), cli::kExitUsage);
  EXPECT_NE(err_.str().find("named twice"), std::string::npos) << err_.str();

  const std::string file = root_ + "/file";
  ASSERT_TRUE(WriteFileAtomically(file, "x").ok());
  EXPECT_EQ(RunRaw({"--controller", address_, "tensorboard", "job-3", "-o", file}), cli::kExitUsage);
  EXPECT_NE(err_.str().find("-o '" + file + "': not a directory"), std::string::npos) << err_.str();
  EXPECT_EQ(RunRaw({"--controller", address_, "tensorboard", "job-3", "-o", file + "/sub"}), cli::kExitUsage);

  EXPECT_EQ(RunRaw({"--controller", address_, "tensorboard", "job-3"}), cli::kExitUsage);
  EXPECT_NE(err_.str().find("--output-dir"), std::string::npos) << err_.str();
  std::vector<fs::path> left;
  for (const auto& e : fs::directory_iterator(out)) left.push_back(e.path());
  EXPECT_TRUE(left.empty()) << left.size() << " entries left, e.g. " << (left.empty() ? "" : left[0].string());
}

}  // namespace
}  // namespace trainyard::testing
