// examples/api/job_api_example.cc, the program docs/api.md shows, against a real
// controller and worker: it must submit a job through the generated client, stream
// every event and end with the job SUCCEEDED. What it printed is checked against the
// job as the CLI sees it. And docs/api.md must show that program word for word.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "tests/support/test_cluster.h"
#include "tests/support/files.h"

namespace trainyard::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

TEST(ApiExampleTest, SubmitsAndWatchesAJobToSucceeded) {
  TestCluster cluster(kBuiltBinaries, "api_example");
  ASSERT_TRUE(cluster.StartController()) << "see " << cluster.dir() / "controller.log";
  cluster.StartWorker(OneSlotWorker("w1"));
  ASSERT_TRUE(cluster.WaitConnected({"w1"}, 30000));

  constexpr int kSteps = 4;
  const CommandResult r =
      RunCommand({TRAINYARD_API_EXAMPLE, "--controller", cluster.address(), "--steps", std::to_string(kSteps)});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("\nfinal state: SUCCEEDED\n"), std::string::npos) << r.out;

  std::smatch submitted;
  ASSERT_TRUE(std::regex_search(r.out, submitted, std::regex(R"(^submitted (job-\d+) \()"))) << r.out;
  const std::string id = submitted[1];
  const json job = cluster.Get(id);
  EXPECT_EQ(job.value("state", ""), "SUCCEEDED");
  EXPECT_EQ(job["spec"]["job"].value("name", ""), "api-example");

  // Every step it printed, with the loss the CLI's watch reports for that step.
  std::map<int64_t, double> printed;
  const std::regex step_line(R"(seq \d+ step (\d+) loss ([0-9.]+) )");
  for (auto it = std::sregex_iterator(r.out.begin(), r.out.end(), step_line); it != std::sregex_iterator(); ++it) {
    printed[std::stoll((*it)[1])] = std::stod((*it)[2]);
  }
  const std::map<int64_t, double> watched = LossesByStep(cluster.Follow(id, "watch.jsonl")->WaitEnd(), 0);
  ASSERT_EQ(watched.size(), static_cast<size_t>(kSteps));
  ASSERT_EQ(printed.size(), watched.size()) << r.out;
  for (const auto& [step, loss] : watched) {
    ASSERT_TRUE(printed.count(step)) << "step " << step << " missing from\n" << r.out;
    EXPECT_NEAR(printed[step], loss, 1e-6) << "step " << step;  // printed with 6 decimals
  }
  // Its event lines are seq 1..last_seq, each once, in order.
  std::vector<int64_t> seqs;
  const std::regex seq_line(R"((^|\n)seq (\d+) )");
  for (auto it = std::sregex_iterator(r.out.begin(), r.out.end(), seq_line); it != std::sregex_iterator(); ++it) {
    seqs.push_back(std::stoll((*it)[2]));
  }
  ASSERT_FALSE(seqs.empty());
  for (size_t i = 0; i < seqs.size(); ++i) EXPECT_EQ(seqs[i], static_cast<int64_t>(i + 1));
  EXPECT_EQ(seqs.back(), JsonInt(job["last_seq"]));
  if (HasFailure()) cluster.KeepFiles();
}

TEST(ApiExampleTest, ARefusedSpecIsReportedWithTheControllersMessage) {
  TestCluster cluster(kBuiltBinaries, "api_example_bad");
  ASSERT_TRUE(cluster.StartController()) << "see " << cluster.dir() / "controller.log";
  const CommandResult r = RunCommand({TRAINYARD_API_EXAMPLE, "--controller", cluster.address(), "--steps", "0"});
  EXPECT_EQ(r.exit_code, 3) << r.out << r.err;
  EXPECT_NE(r.err.find("SubmitJob: INVALID_ARGUMENT: training.steps"), std::string::npos) << r.err;
}

// docs/api.md embeds the program between these markers; the two must not drift apart.
TEST(ApiExampleTest, DocsShowTheExampleVerbatim) {
  const std::string doc = ReadFileOrEmpty(fs::path(TRAINYARD_SOURCE_DIR) / "docs/api.md");
  const std::string program = ReadFileOrEmpty(fs::path(TRAINYARD_SOURCE_DIR) / "examples/api/job_api_example.cc");
  ASSERT_FALSE(program.empty());
  const std::string begin = "<!-- begin examples/api/job_api_example.cc -->\n```cpp\n";
  const std::string end = "```\n<!-- end examples/api/job_api_example.cc -->";
  const size_t b = doc.find(begin);
  ASSERT_NE(b, std::string::npos) << "docs/api.md lacks: " << begin;
  const size_t e = doc.find(end, b);
  ASSERT_NE(e, std::string::npos) << "docs/api.md lacks: " << end;
  EXPECT_EQ(doc.substr(b + begin.size(), e - b - begin.size()), program)
      << "docs/api.md's copy of examples/api/job_api_example.cc differs from the file";
}

}  // namespace
}  // namespace trainyard::testing
