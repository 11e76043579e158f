#include "worker/daemon/launch_spec.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <fstream>
#include <sstream>

#include "common/events/proto_json.h"
#include "tests/support/temp_dir.h"
#include "tests/support/files.h"

namespace trainyard {
namespace {

using testing::TempDir;

v1::Assign MakeAssign() {
  v1::Assign a;
  a.set_job_id("job-9");
  a.set_attempt(4);
  a.set_world_size(4);
  a.add_ranks(2);
  a.add_ranks(0);
  a.set_master_addr("10.0.0.1");
  a.set_master_port(29611);
  a.mutable_spec()->mutable_job()->set_name("moe");
  return a;
}

LaunchSpecBuilder::Options MakeOptions(const std::string &work_dir) {
  return {.rank_binary = "/opt/ty/trainyard-rank",
          .work_dir = work_dir,
          .gloo_host = "10.0.0.5",
          .threads_per_rank = 3};
}

TEST(LaunchSpecBuilderTest, BuildsOneLaunchPerRankInAssignOrder) {
  LaunchSpecBuilder builder(MakeOptions("/srv/w"));
  absl::StatusOr<AttemptLaunch> launch = builder.Build(MakeAssign());
  ASSERT_TRUE(launch.ok()) << launch.status();
  EXPECT_EQ(launch->attempt_dir, "/srv/w/job-9/4");
  EXPECT_EQ(launch->config_path, "/srv/w/job-9/4/config.json");
  EXPECT_EQ(launch->artifacts_dir, "/srv/w/job-9/4/artifacts");
  ASSERT_EQ(launch->ranks.size(), 2u);
  const int expected_ranks[] = {2, 0};
  for (size_t i = 0; i < 2; ++i) {
    const RankLaunch &r = launch->ranks[i];
    const std::string rank = std::to_string(expected_ranks[i]);
    EXPECT_EQ(r.rank, expected_ranks[i]);
    EXPECT_EQ(r.request.binary, "/opt/ty/trainyard-rank");
    EXPECT_EQ(r.request.args,
              (std::vector<std::string>{"--config", "/srv/w/job-9/4/config.json", "--rank", rank,
                                        "--world-size", "4", "--master-addr", "10.0.0.1",
                                        "--master-port", "29611", "--gloo-host", "10.0.0.5",
                                        "--attempt", "4", "--threads", "3", "--run-dir",
                                        "/srv/w/job-9/4", "--local-rank", std::to_string(i)}));
  }
}

TEST(LaunchSpecBuilderTest, RanksGetTheCheckpointDirAndTheCheckpointToResumeFrom) {
  v1::Assign assign = MakeAssign();
  assign.set_checkpoint_dir("/shared/ck/job-9");
  assign.set_resume_path("/shared/ck/job-9/step-00000010-attempt-3");
  absl::StatusOr<AttemptLaunch> launch = LaunchSpecBuilder(MakeOptions("/srv/w")).Build(assign);
  ASSERT_TRUE(launch.ok()) << launch.status();
  for (const RankLaunch &r : launch->ranks) {
    const std::vector<std::string> &args = r.request.args;
    ASSERT_GE(args.size(), 4u);
    EXPECT_EQ(std::vector<std::string>(args.end() - 4, args.end()),
              (std::vector<std::string>{"--checkpoint-dir", "/shared/ck/job-9", "--resume",
                                        "/shared/ck/job-9/step-00000010-attempt-3"}));
  }
}

TEST(LaunchSpecBuilderTest, ConfigTextIsTheSpecAsOneJsonLine) {
  v1::Assign assign = MakeAssign();
  assign.mutable_spec()->mutable_training()->set_steps(77);
  absl::StatusOr<AttemptLaunch> launch = LaunchSpecBuilder(MakeOptions("/w")).Build(assign);
  ASSERT_TRUE(launch.ok());
  const std::string &text = launch->config_text;
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 1);
  EXPECT_EQ(text.back(), '\n');
  v1::JobSpec spec;
  ASSERT_TRUE(FromJson(text, &spec).ok()) << text;
  EXPECT_EQ(spec.job().name(), "moe");
  EXPECT_EQ(spec.training().steps(), 77);
  EXPECT_EQ(spec.SerializeAsString(), assign.spec().SerializeAsString());
}

TEST(LaunchSpecBuilderTest, RejectsUnsafeJobIdsAndBadRanks) {
  struct Case {
    std::string what;
    std::function<void(v1::Assign &)> edit;
  };
  const std::vector<Case> cases = {
      {"parent dir", [](v1::Assign &a) { a.set_job_id("../etc"); }},
      {"slash", [](v1::Assign &a) { a.set_job_id("a/b"); }},
      {"empty", [](v1::Assign &a) { a.set_job_id(""); }},
      {"dot", [](v1::Assign &a) { a.set_job_id("."); }},
      {"dotdot", [](v1::Assign &a) { a.set_job_id(".."); }},
      {"space", [](v1::Assign &a) { a.set_job_id("a b"); }},
      {"201 chars", [](v1::Assign &a) { a.set_job_id(std::string(201, 'x')); }},
      {"no ranks", [](v1::Assign &a) { a.clear_ranks(); }},
      {"world 0", [](v1::Assign &a) { a.set_world_size(0); }},
      {"rank = world", [](v1::Assign &a) { a.add_ranks(4); }},
      {"negative rank", [](v1::Assign &a) { a.add_ranks(-1); }},
      {"duplicate rank", [](v1::Assign &a) { a.add_ranks(2); }},
      {"relative resume path", [](v1::Assign &a) { a.set_resume_path("ck/step-1"); }},
      {"resume path with newline", [](v1::Assign &a) { a.set_resume_path("/ck/a\nb"); }},
      {"resume path over 4096 bytes", [](v1::Assign &a) { a.set_resume_path("/" + std::string(4096, 'p')); }},
      {"relative checkpoint dir", [](v1::Assign &a) { a.set_checkpoint_dir("ck/job-9"); }},
      {"checkpoint dir with NUL", [](v1::Assign &a) { a.set_checkpoint_dir(std::string("/ck\0x", 5)); }},
  };
  LaunchSpecBuilder builder(MakeOptions("/w"));
  for (const Case &c : cases) {
    v1::Assign a = MakeAssign();
    c.edit(a);
    EXPECT_EQ(LaunchSpecBuilder::Validate(a).code(), absl::StatusCode::kInvalidArgument) << c.what;
    EXPECT_EQ(builder.Build(a).status().code(), absl::StatusCode::kInvalidArgument) << c.what;
  }
  for (std::string ok : {std::string(200, 'x'), std::string("a.b_c-D9"), std::string("..a")}) {
    v1::Assign a = MakeAssign();
    a.set_job_id(ok);
    EXPECT_TRUE(LaunchSpecBuilder::Validate(a).ok()) << ok;
  }
}

TEST(LaunchSpecBuilderTest, WriteConfigCreatesTheAttemptDirAndReplacesTheFile) {
  TempDir dir;
  LaunchSpecBuilder builder(MakeOptions(dir.path() + "/work"));
  v1::Assign assign = MakeAssign();
  absl::StatusOr<AttemptLaunch> launch = builder.Build(assign);
  ASSERT_TRUE(launch.ok());
  ASSERT_TRUE(LaunchSpecBuilder::WriteConfig(*launch).ok());
  EXPECT_EQ(testing::ReadFileOrEmpty(dir.path() + "/work/job-9/4/config.json"), launch->config_text);

  assign.mutable_spec()->mutable_job()->set_name("second");
  launch = builder.Build(assign);
  ASSERT_TRUE(launch.ok());
  ASSERT_TRUE(LaunchSpecBuilder::WriteConfig(*launch).ok());
  v1::JobSpec spec;
  ASSERT_TRUE(FromJson(testing::ReadFileOrEmpty(launch->config_path), &spec).ok());
  EXPECT_EQ(spec.job().name(), "second");
  // Only the final file is left (the temporary one was renamed over it), beside the
  // directory the ranks put artifacts in.
  std::vector<std::string> names;
  for (auto &entry : std::filesystem::directory_iterator(launch->attempt_dir)) {
    names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"artifacts", "config.json"}));
  EXPECT_TRUE(std::filesystem::is_directory(dir.path() + "/work/job-9/4/artifacts"));
}

TEST(LaunchSpecBuilderTest, WriteConfigReportsADirectoryThatCannotBeCreated) {
  TempDir dir;
  std::ofstream(dir.path() + "/file") << "x";  // a file where the work dir should be
  absl::StatusOr<AttemptLaunch> launch =
      LaunchSpecBuilder(MakeOptions(dir.path() + "/file")).Build(MakeAssign());
  ASSERT_TRUE(launch.ok());
  absl::Status status = LaunchSpecBuilder::WriteConfig(*launch);
  EXPECT_EQ(status.code(), absl::StatusCode::kInternal);
  EXPECT_NE(status.message().find("cannot create " + dir.path() + "/file/job-9/4"),
            std::string::npos)
      << status;
}

}  // namespace
}  // namespace trainyard
