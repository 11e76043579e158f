// `trainyard artifacts list|pull` and JobClient's artifact calls against an in-process
// fake JobService (only ListArtifacts and PullArtifact) on a loopback port, and the
// artifacts table formatting.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "client/cli/cli_format.h"
#include "client/cli/commands.h"
#include "common/events/proto_json.h"
#include "common/base/sha256.h"
#include "tests/support/temp_dir.h"
#include "tests/client/cli/cli_test_fixture.h"
#include "tests/support/files.h"

namespace trainyard {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::StartsWith;
using testing::TempDir;

using Pull = testing::FakeJobService::PullMode;

std::vector<std::string> DirEntries(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

class CliArtifactsTest : public testing::CliTest {
 protected:
  void SetUp() override {
    CliTest::SetUp();
    service_.FailCall("ListArtifacts", "nope", grpc::Status(grpc::StatusCode::NOT_FOUND, "job not found"));
    big_ = std::string(1000, 'x') + "tail";
  }

  int Run(std::vector<std::string> args) {
    args.push_back("--controller");
    args.push_back(address_);
    return RunRaw(args);
  }

  // An artifact of job j1 that pulls as `mode` says.
  void Add(const std::string& name, const std::string& bytes, Pull mode = Pull::kHonest, int rank = 0) {
    v1::ArtifactInfo info;
    info.set_job_id("j1");
    info.set_name(name);
    info.set_kind(rank < 0 ? "flight_recorder" : "trace");
    info.set_attempt(2);
    info.set_rank(rank);
    info.set_worker("w1");
    info.set_size_bytes(static_cast<int64_t>(bytes.size()));
    info.set_sha256(Sha256Hex(bytes));
    info.mutable_create_time()->set_seconds(1'796'098'325);  // 2026-12-01T04:12:05Z
    service_.AddArtifact(info, bytes, mode);
  }

  TempDir dir_;
  std::string big_;
};

TEST(ArtifactFormatTest, TableShowsSizeShaPrefixRankAndUtcTime) {
  v1::ArtifactInfo a;
  a.set_name("trace-r1.json");
  a.set_kind("trace");
  a.set_attempt(3);
  a.set_rank(1);
  a.set_size_bytes(1536);
  a.set_sha256(std::string(64, 'a'));
  a.mutable_create_time()->set_seconds(1'796'098'325);
  v1::ArtifactInfo b;
  b.set_name("flight-w1.bin");
  b.set_kind("flight_recorder");
  b.set_attempt(3);
  b.set_rank(-1);
  b.set_size_bytes(12);
  b.set_sha256(std::string(64, 'b'));
  EXPECT_EQ(cli::FormatArtifactsTable({a, b}),
            "NAME           KIND             ATTEMPT  RANK  SIZE     SHA256        TIME\n"
            "trace-r1.json  trace            3        1     1.5 KiB  aaaaaaaaaaaa  2026-12-01T04:12:05Z\n"
            "flight-w1.bin  flight_recorder  3        -     12 B     bbbbbbbbbbbb  -\n");
  EXPECT_EQ(cli::FormatBytes(0), "0 B");
  EXPECT_EQ(cli::FormatBytes(1023), "1023 B");
  EXPECT_EQ(cli::FormatBytes(3 << 20), "3.0 MiB");
  EXPECT_EQ(cli::FormatBytes(int64_t{5} << 30), "5.0 GiB");
}

TEST_F(CliArtifactsTest, ListPrintsATableOrJsonLines) {
  Add("a.json", "{}");
  Add("flight-w1.bin", "ring", Pull::kHonest, -1);
  ASSERT_EQ(Run({"artifacts", "list", "j1"}), 0) << err_.str();
  EXPECT_THAT(out_.str(), HasSubstr("a.json         trace"));
  EXPECT_THAT(out_.str(), HasSubstr("flight-w1.bin  flight_recorder  2        -     4 B"));
  ASSERT_EQ(Run({"artifacts", "list", "j1", "--json"}), 0) << err_.str();
  std::istringstream lines(out_.str());
  std::string line;
  ASSERT_TRUE(std::getline(lines, line));
  v1::ArtifactInfo info;
  ASSERT_TRUE(FromJson(line, &info).ok()) << line;
  EXPECT_EQ(info.name(), "a.json");
  EXPECT_EQ(info.sha256(), Sha256Hex("{}"));
}

TEST_F(CliArtifactsTest, ListOfAnUnknownJobExitsThree) {
  EXPECT_EQ(Run({"artifacts", "list", "nope"}), 3);  // not found
  EXPECT_THAT(err_.str(), StartsWith("trainyard: NOT_FOUND: job not found"));
}

TEST_F(CliArtifactsTest, PullsOneArtifactIntoTheOutputDirectory) {
  Add("trace.json", big_);
  Add("other.json", "{}");
  const std::string out = dir_.path() + "/new/dir";  // created
  ASSERT_EQ(Run({"artifacts", "pull", "j1", "trace.json", "-o", out}), 0) << err_.str();
  EXPECT_EQ(testing::ReadFileOrEmpty(out + "/trace.json"), big_);
  EXPECT_EQ(DirEntries(out), std::vector<std::string>{"trace.json"});  // no temp file left
  EXPECT_EQ(out_.str(), "wrote " + out + "/trace.json (1004 B, sha256 " +
                            Sha256Hex(big_).substr(0, 12) + ")\n");
}

TEST_F(CliArtifactsTest, PullsEveryArtifactWhenNoNameIsGiven) {
  Add("a.json", big_);
  Add("b.bin", "");
  Add("c.json", "{}");
  ASSERT_EQ(Run({"artifacts", "pull", "j1", "--output-dir", dir_.path()}), 0) << err_.str();
  EXPECT_EQ(DirEntries(dir_.path()), (std::vector<std::string>{"a.json", "b.bin", "c.json"}));
  EXPECT_EQ(testing::ReadFileOrEmpty(dir_.path() + "/a.json"), big_);
  EXPECT_EQ(testing::ReadFileOrEmpty(dir_.path() + "/b.bin"), "");
  EXPECT_EQ(testing::ReadFileOrEmpty(dir_.path() + "/c.json"), "{}");
}

TEST_F(CliArtifactsTest, ABadChecksumOrShortStreamWritesNothing) {
  Add("bad.json", big_, Pull::kWrongSha);
  Add("short.json", big_, Pull::kTruncated);
  Add("good.json", "{}");
  std::ofstream(dir_.path() + "/bad.json") << "kept";
  EXPECT_EQ(Run({"artifacts", "pull", "j1", "bad.json", "-o", dir_.path()}), 6);  // DATA_LOSS
  EXPECT_THAT(err_.str(), HasSubstr("DATA_LOSS: artifact bad.json: sha256 "));
  EXPECT_EQ(testing::ReadFileOrEmpty(dir_.path() + "/bad.json"), "kept");  // the old file is untouched
  EXPECT_EQ(DirEntries(dir_.path()), std::vector<std::string>{"bad.json"});

  // Pulling all goes on past the failures and then exits with the last one's code.
  EXPECT_EQ(Run({"artifacts", "pull", "j1", "-o", dir_.path()}), 6);
  EXPECT_THAT(err_.str(), HasSubstr("artifact short.json: received 502 of 1004 bytes"));
  EXPECT_THAT(err_.str(), HasSubstr("2 of 3 artifacts not pulled"));
  EXPECT_EQ(DirEntries(dir_.path()), (std::vector<std::string>{"bad.json", "good.json"}));
}

TEST_F(CliArtifactsTest, AHostileControllerCannotWriteOutsideTheDirectory) {
  Add("x.json", "{}", Pull::kOtherName);  // answers with name ".."
  Add("noinfo.json", "{}", Pull::kNoInfo);
  const std::string out = dir_.path() + "/out";
  EXPECT_EQ(Run({"artifacts", "pull", "j1", "x.json", "-o", out}), 6);
  EXPECT_THAT(err_.str(), HasSubstr("with artifact '..'"));
  EXPECT_EQ(Run({"artifacts", "pull", "j1", "noinfo.json", "-o", out}), 6);
  EXPECT_THAT(err_.str(), HasSubstr("did not start with its info"));
  EXPECT_EQ(Run({"artifacts", "pull", "j1", "../escape", "-o", out}), 2);
  EXPECT_THAT(err_.str(), HasSubstr("INVALID_ARGUMENT: artifact name '../escape'"));
  EXPECT_TRUE(DirEntries(out).empty());
  EXPECT_EQ(DirEntries(dir_.path()), std::vector<std::string>{"out"});
}

TEST_F(CliArtifactsTest, PullOfAMissingArtifactExitsThree) {
  EXPECT_EQ(Run({"artifacts", "pull", "j1", "nope.json", "-o", dir_.path()}), 3);
  EXPECT_THAT(err_.str(), HasSubstr("NOT_FOUND: artifact nope.json of job j1 not found"));
  EXPECT_TRUE(DirEntries(dir_.path()).empty());
}

TEST_F(CliArtifactsTest, HelpListsTheArtifactsCommands) {
  EXPECT_EQ(Run({"--help"}), 0);
  EXPECT_THAT(out_.str(), HasSubstr("artifacts"));
  EXPECT_EQ(Run({"artifacts", "pull", "--help"}), 0);
  EXPECT_THAT(out_.str(), HasSubstr("-o,--output-dir"));
}

}  // namespace
}  // namespace trainyard
