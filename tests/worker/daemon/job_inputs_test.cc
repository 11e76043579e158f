// CheckJobInputs: the files a job's ranks will open, checked on the worker first.
#include "worker/daemon/job_inputs.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include "tests/support/temp_dir.h"

namespace trainyard {
namespace {

using ::testing::HasSubstr;
using testing::TempDir;

v1::JobSpec Text(const std::string& path) {
  v1::JobSpec spec;
  spec.mutable_training()->set_dataset("text");
  spec.mutable_training()->set_dataset_path(path);
  return spec;
}

std::string Touch(const std::string& path) {
  std::ofstream(path) << "some text\n";
  return path;
}

TEST(JobInputsTest, SyntheticDataAndNoWeightsNeedNoFile) {
  v1::JobSpec spec;
  spec.mutable_training()->set_dataset("synthetic");
  spec.mutable_validation()->set_dataset("synthetic");
  EXPECT_TRUE(CheckJobInputs(spec, false).ok());
  EXPECT_TRUE(CheckJobInputs(v1::JobSpec(), false).ok());
}

TEST(JobInputsTest, AMissingDatasetFileIsNamedWithItsKeyAndEntry) {
  TempDir dir;
  const std::string missing = dir.path() + "/corpus.txt";
  const absl::Status s = CheckJobInputs(Text(missing), false);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "training.dataset_path: entry \"" + missing + "\": file " + missing + " does not exist");
  EXPECT_TRUE(CheckJobInputs(Text(Touch(missing)), false).ok());
}

TEST(JobInputsTest, ListsGlobsAndTheValidationSetAreExpandedAsTheReaderDoes) {
  TempDir dir;
  const std::string a = Touch(dir.path() + "/a.txt");
  v1::JobSpec spec = Text(a + "," + dir.path() + "/shard-*.txt");
  EXPECT_THAT(std::string(CheckJobInputs(spec, false).message()), HasSubstr("the pattern matches no file"));
  Touch(dir.path() + "/shard-0.txt");
  EXPECT_TRUE(CheckJobInputs(spec, false).ok());

  spec.mutable_validation()->set_dataset("tokens");
  spec.mutable_validation()->set_dataset_path(dir.path() + "/val.idx");
  const absl::Status s = CheckJobInputs(spec, false);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(s.message()), HasSubstr("validation.dataset_path: entry"));
}

TEST(JobInputsTest, AnUnreadableFileIsRefused) {
  if (geteuid() == 0) GTEST_SKIP() << "root reads every file";
  TempDir dir;
  const std::string locked = Touch(dir.path() + "/locked.txt");
  ASSERT_EQ(chmod(locked.c_str(), 0), 0);
  const absl::Status s = CheckJobInputs(Text(locked), false);
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(std::string(s.message()), HasSubstr("cannot read " + locked + ": Permission denied"));
}

TEST(JobInputsTest, InitialWeightsMustExistUnlessTheAttemptResumes) {
  TempDir dir;
  v1::JobSpec spec;
  spec.mutable_checkpoint()->set_initial_load_path(dir.path() + "/weights.safetensors");
  const absl::Status s = CheckJobInputs(spec, false);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "checkpoint.initial_load_path: " + dir.path() + "/weights.safetensors does not exist");
  EXPECT_TRUE(CheckJobInputs(spec, /*resuming=*/true).ok()) << "a restart reads its checkpoint instead";
}

}  // namespace
}  // namespace trainyard
