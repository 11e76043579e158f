#include "worker/daemon/stderr_limiter.h"

#include <gtest/gtest.h>

namespace trainyard {
namespace {

using Lines = std::vector<std::string>;
const absl::Time kT0 = absl::FromUnixSeconds(1000);

TEST(StderrLimiterTest, RelaysUpToTheLimitPerWindowThenCountsDrops) {
  StderrLimiter limiter(/*lines_per_second=*/3, /*tail_lines=*/10);
  EXPECT_EQ(limiter.Offer("a", kT0), Lines{"a"});
  EXPECT_EQ(limiter.Offer("b", kT0 + absl::Milliseconds(100)), Lines{"b"});
  EXPECT_EQ(limiter.Offer("c", kT0 + absl::Milliseconds(200)), Lines{"c"});
  EXPECT_EQ(limiter.Offer("d", kT0 + absl::Milliseconds(300)), Lines{});
  // Still the window that began at kT0.
  EXPECT_EQ(limiter.Offer("e", kT0 + absl::Milliseconds(999)), Lines{});
  // A new window: first the notice for the old one, then the line.
  EXPECT_EQ(limiter.Offer("f", kT0 + absl::Seconds(1)), (Lines{"2 lines dropped", "f"}));
  EXPECT_EQ(limiter.Flush(), std::nullopt);
}

TEST(StderrLimiterTest, AWindowStartsAtTheFirstLineAfterTheLastOneEnded) {
  StderrLimiter limiter(1, 10);
  EXPECT_EQ(limiter.Offer("a", kT0), Lines{"a"});
  EXPECT_EQ(limiter.Offer("b", kT0 + absl::Milliseconds(1500)), Lines{"b"});
  // The second window began at kT0 + 1.5 s, not kT0 + 1 s.
  EXPECT_EQ(limiter.Offer("c", kT0 + absl::Milliseconds(2400)), Lines{});
  EXPECT_EQ(limiter.Offer("d", kT0 + absl::Milliseconds(2500)), (Lines{"1 lines dropped", "d"}));
}

TEST(StderrLimiterTest, FlushReportsDropsOnce) {
  StderrLimiter limiter(1, 10);
  limiter.Offer("a", kT0);
  for (int i = 0; i < 3; ++i) limiter.Offer("x", kT0);
  EXPECT_EQ(limiter.Flush(), "3 lines dropped");
  EXPECT_EQ(limiter.Flush(), std::nullopt);
}

TEST(StderrLimiterTest, TailKeepsTheLastLinesRelayedOrNot) {
  StderrLimiter limiter(1, 2);
  EXPECT_EQ(limiter.Tail(), "");
  limiter.Offer("one", kT0);
  EXPECT_EQ(limiter.Tail(), "one");
  limiter.Offer("two", kT0);    // dropped, still in the tail
  limiter.Offer("three", kT0);  // dropped
  EXPECT_EQ(limiter.Tail(), "two\nthree");
}

}  // namespace
}  // namespace trainyard
