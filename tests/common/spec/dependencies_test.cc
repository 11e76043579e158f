// job.after at the spec level: the list's syntax and canonical text, the key through
// every reader, and the hostile lists refused with a precise error.
#include "common/spec/dependencies.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "common/spec/job_file_reader.h"
#include "common/spec/presets.h"

namespace trainyard::spec {
namespace {

using ::testing::HasSubstr;

std::string Error(const std::string& text) {
  auto r = ParseAfter(text);
  return r.ok() ? "" : r.error().message;
}

TEST(AfterTest, ParsesJobsAndConditionsWithSucceededTheDefault) {
  auto r = ParseAfter(" job-3 , job-4:failed,job-5 : ended,a.b_c-9:started ");
  ASSERT_TRUE(r.ok()) << r.error().message;
  const auto& e = r.value();
  ASSERT_EQ(e.size(), 4u);
  EXPECT_EQ(e[0].job, "job-3");
  EXPECT_EQ(e[0].condition, AfterCondition::kSucceeded);
  EXPECT_EQ(e[1].condition, AfterCondition::kFailed);
  EXPECT_EQ(e[2].job, "job-5");
  EXPECT_EQ(e[2].condition, AfterCondition::kEnded);
  EXPECT_EQ(e[3].job, "a.b_c-9");
  EXPECT_EQ(e[3].condition, AfterCondition::kStarted);
  EXPECT_EQ(AfterText(e), "job-3,job-4:failed,job-5:ended,a.b_c-9:started");
  EXPECT_EQ(AfterText(ParseAfter("job-1:succeeded").value()), "job-1");
  EXPECT_TRUE(ParseAfter("").value().empty());
  EXPECT_TRUE(ParseAfter("   ").value().empty());
}

TEST(AfterTest, HostileListsAreRefusedPrecisely) {
  EXPECT_EQ(Error("job-1,,job-2"), "job.after: an empty entry in \"job-1,,job-2\" (a stray comma?)");
  EXPECT_EQ(Error("job-1,"), "job.after: an empty entry in \"job-1,\" (a stray comma?)");
  EXPECT_EQ(Error(":failed"), "job.after: \":failed\" names no job");
  EXPECT_EQ(Error("job-1:soon"),
            "job.after: unknown condition \"soon\" in \"job-1:soon\" (known: succeeded, failed, ended, started)");
  EXPECT_EQ(Error("job-1:failed:ended"),
            "job.after: unknown condition \"failed:ended\" in \"job-1:failed:ended\" (known: succeeded, failed, "
            "ended, started)");
  EXPECT_EQ(Error("job-1,job-1:failed"), "job.after: job job-1 is named twice; give each job once, with one condition");
  EXPECT_THAT(Error("j\xc3\xa9-1"), HasSubstr("is not a job id"));
  EXPECT_THAT(Error("job 1"), HasSubstr("\"job 1\" is not a job id"));
  EXPECT_THAT(Error("job-1;rm"), HasSubstr("is not a job id"));
  EXPECT_THAT(Error(std::string(65, 'j')), HasSubstr("over the limit of 64"));
  std::string many;
  for (int i = 0; i < 17; ++i) many += (i ? "," : "") + std::string("job-") + std::to_string(i);
  EXPECT_EQ(Error(many), "job.after names more than 16 jobs; a dependent may wait for at most 16");
  std::string sixteen = many.substr(0, many.rfind(','));
  EXPECT_EQ(ParseAfter(sixteen).value().size(), 16u);
  EXPECT_THAT(Error(std::string(1 << 20, 'j')), HasSubstr("bytes long, over the limit of"));
  auto r = ParseAfter("job-1:soon");
  EXPECT_EQ(r.error().field, "job.after");
}

TEST(AfterTest, TheKeyReadsFromTomlJsonAndSetAndItsRuleNamesTheOrigin) {
  auto toml = ParseJobText("[job]\nafter = \"job-1, job-2:ended\"\n", "job.toml");
  ASSERT_TRUE(toml.ok()) << toml.error().ToString();
  EXPECT_EQ(ResolveAndValidate(toml.value()).value().job.after, "job-1, job-2:ended");
  auto json = ParseJobText(R"({"job": {"after": "job-1"}})", "job.json");
  ASSERT_TRUE(json.ok());
  EXPECT_EQ(ResolveAndValidate(json.value()).value().job.after, "job-1");
  auto set = ParseJobText("", "job.toml", {"job.after=\"job-1:started\""});
  ASSERT_TRUE(set.ok()) << set.error().ToString();
  EXPECT_EQ(ResolveAndValidate(set.value()).value().job.after, "job-1:started");
  auto bad = ParseJobText("[job]\nafter = \"job-1,,\"\n", "job.toml");
  ASSERT_TRUE(bad.ok());
  EXPECT_EQ(ResolveAndValidate(bad.value()).error().ToString(),
            "job.toml:2:9: job.after: an empty entry in \"job-1,,\" (a stray comma?)");
  // A list is one string: a TOML array is a type error naming the key.
  auto array = ParseJobText("[job]\nafter = [\"job-1\"]\n", "job.toml");
  EXPECT_FALSE(array.ok() && ResolveAndValidate(array.value()).ok());
  EXPECT_EQ(ResolveAndValidate(ParseJobText("", "job.toml").value()).value().job.after, "");
}

}  // namespace
}  // namespace trainyard::spec
