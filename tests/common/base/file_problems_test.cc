#include "common/base/file_problems.h"

#include <gtest/gtest.h>

namespace trainyard {
namespace {

TEST(FileProblemsTest, NoProblemIsOk) {
  FileProblems problems("p.toml");
  EXPECT_TRUE(problems.empty());
  EXPECT_TRUE(problems.Result().ok());
}

TEST(FileProblemsTest, TheEarliestInTheFileIsNamedAndTheRestCounted) {
  FileProblems problems("p.toml");
  problems.Add(9, 1, "late");
  problems.Add(3, 7, "second on line 3");
  problems.Add(3, 2, "first on line 3");
  const absl::Status s = problems.Result();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "p.toml:3: first on line 3 (and 2 more problems)");

  FileProblems two("q.toml");
  two.Add(2, 1, "b");
  two.Add(1, 1, "a");
  EXPECT_EQ(two.Result().message(), "q.toml:1: a (and 1 more problem)");
}

TEST(FileProblemsTest, FirstInvalidUtf8Line) {
  EXPECT_EQ(FirstInvalidUtf8Line(""), 0u);
  EXPECT_EQ(FirstInvalidUtf8Line("a = 1\nb = \"\xc3\xa9\"\n"), 0u);
  EXPECT_EQ(FirstInvalidUtf8Line("a = 1\nb = 2\nc = \"\xff\"\n"), 3u);
  EXPECT_EQ(FirstInvalidUtf8Line("\xc3"), 1u);          // cut sequence at the end
  EXPECT_EQ(FirstInvalidUtf8Line("x\n\xc3\n\xa9"), 2u);  // a sequence split by a newline
}

}  // namespace
}  // namespace trainyard
