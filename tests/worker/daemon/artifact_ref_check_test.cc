// CheckArtifactRef: which ArtifactRef events a rank may use to have a file uploaded.
#include "worker/daemon/artifact_ref_check.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "tests/support/temp_dir.h"

namespace trainyard {
namespace {

using ::testing::HasSubstr;
using testing::TempDir;

class ArtifactRefCheckTest : public ::testing::Test {
 protected:
  ArtifactRefCheckTest() {
    std::filesystem::create_directories(artifacts_);
    std::ofstream(artifacts_ + "/trace.json") << "{}";
    std::ofstream(dir_.path() + "/outside.txt") << "secret";
  }
  v1::ArtifactRef Ref(const std::string &name, const std::string &path,
                      const std::string &kind = "trace") {
    v1::ArtifactRef ref;
    ref.set_name(name);
    ref.set_kind(kind);
    ref.set_uri("file://" + path);
    return ref;
  }
  std::string Refusal(const v1::ArtifactRef &ref) {
    absl::StatusOr<std::string> path = CheckArtifactRef(ref, artifacts_);
    EXPECT_FALSE(path.ok()) << *path;
    EXPECT_EQ(path.status().code(), absl::StatusCode::kInvalidArgument);
    return std::string(path.status().message());
  }

  TempDir dir_;
  const std::string artifacts_ = dir_.path() + "/job1/1/artifacts";
};

TEST(ArtifactNameTest, FollowsTheProtoPattern) {
  EXPECT_TRUE(IsArtifactName("a"));
  EXPECT_TRUE(IsArtifactName("trace-rank0.step_5.json"));
  EXPECT_TRUE(IsArtifactName("9" + std::string(127, 'x')));
  EXPECT_FALSE(IsArtifactName(""));
  EXPECT_FALSE(IsArtifactName("9" + std::string(128, 'x')));
  EXPECT_FALSE(IsArtifactName(".hidden"));
  EXPECT_FALSE(IsArtifactName("-x"));
  EXPECT_FALSE(IsArtifactName(".."));
  EXPECT_FALSE(IsArtifactName("a/b"));
  EXPECT_FALSE(IsArtifactName("a b"));
  EXPECT_FALSE(IsArtifactName("trace.json.part"));  // the controller's partial files
  EXPECT_TRUE(IsArtifactName("trace.part.json"));
  EXPECT_FALSE(IsArtifactName("caf\xc3\xa9"));
  EXPECT_TRUE(IsArtifactKind("trace"));
  EXPECT_TRUE(IsArtifactKind("flight_recorder"));
  EXPECT_FALSE(IsArtifactKind("core"));
  EXPECT_FALSE(IsArtifactKind(""));
}

TEST_F(ArtifactRefCheckTest, AcceptsARegularFileInsideTheArtifactsDirectory) {
  absl::StatusOr<std::string> path = CheckArtifactRef(Ref("t1", artifacts_ + "/trace.json"),
                                                      artifacts_);
  ASSERT_TRUE(path.ok()) << path.status();
  EXPECT_EQ(*path, std::filesystem::canonical(artifacts_ + "/trace.json").string());
  // A dotted path that stays inside resolves to the same file.
  path = CheckArtifactRef(Ref("t1", artifacts_ + "/../artifacts/./trace.json", "flight_recorder"),
                          artifacts_);
  ASSERT_TRUE(path.ok()) << path.status();
}

TEST_F(ArtifactRefCheckTest, RefusesBadNamesKindsAndUris) {
  EXPECT_THAT(Refusal(Ref("../x", artifacts_ + "/trace.json")), HasSubstr("artifact name '../x'"));
  EXPECT_THAT(Refusal(Ref("t1", artifacts_ + "/trace.json", "core")), HasSubstr("kind 'core'"));
  v1::ArtifactRef ref = Ref("t1", "");
  ref.set_uri("http://example/trace.json");
  EXPECT_THAT(Refusal(ref), HasSubstr("must be file://"));
  ref.set_uri("file://relative/trace.json");
  EXPECT_THAT(Refusal(ref), HasSubstr("must be file://"));
  ref.set_uri("file://" + std::string(300, '/'));
  EXPECT_THAT(Refusal(ref), HasSubstr("..."));  // quoted at most 100 characters
}

TEST_F(ArtifactRefCheckTest, RefusesFilesOutsideTheDirectoryAndSymlinkEscapes) {
  EXPECT_THAT(Refusal(Ref("t1", dir_.path() + "/outside.txt")), HasSubstr("is not inside"));
  EXPECT_THAT(Refusal(Ref("t1", artifacts_ + "/../../../outside.txt")),
              HasSubstr("is not inside"));
  ASSERT_EQ(symlink((dir_.path() + "/outside.txt").c_str(), (artifacts_ + "/link").c_str()), 0);
  EXPECT_THAT(Refusal(Ref("t1", artifacts_ + "/link")), HasSubstr("is not inside"));
  // The directory itself, a missing file and a directory inside are not regular files.
  EXPECT_THAT(Refusal(Ref("t1", artifacts_)), HasSubstr("not an existing regular file"));
  EXPECT_THAT(Refusal(Ref("t1", artifacts_ + "/missing")), HasSubstr("not an existing regular file"));
  std::filesystem::create_directories(artifacts_ + "/sub");
  EXPECT_THAT(Refusal(Ref("t1", artifacts_ + "/sub")), HasSubstr("not an existing regular file"));
  // A sibling directory whose name extends the artifacts directory's is outside.
  std::filesystem::create_directories(artifacts_ + "2");
  std::ofstream(artifacts_ + "2/x") << "x";
  EXPECT_THAT(Refusal(Ref("t1", artifacts_ + "2/x")), HasSubstr("is not inside"));
}

}  // namespace
}  // namespace trainyard
